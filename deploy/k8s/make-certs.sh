#!/bin/sh
# The secrets an overlay's generators read, written to OUT (overlays/<name>/secrets):
#   ca.pem, ca-key.pem          a certificate authority for the sandbox engines (keep ca-key.pem
#                               off the cluster: it signs engines)
#   server-cert.pem, server-key.pem
#                               the engines' certificate, valid for each engine's names
#                               (sandbox-engine-<n>.sandbox-engine[.<ns>.svc[.cluster.local]])
#   client/ca.pem, client/cert.pem, client/key.pem
#                               the servers' client certificate (extendedKeyUsage=clientAuth),
#                               which the engines' dockerd --tlsverify asks for, beside the CA:
#                               Docker's DOCKER_CERT_PATH layout, as
#                               REWARD_SERVER_SANDBOX_TLS_CERT_PATH (and `docker --tlsverify`)
#                               read it
#   api-token                   the server's bearer token (REWARD_SERVER_API_TOKEN)
# Usage: make-certs.sh OUT NAMESPACE ENGINES [EXTRA_DNS_NAME...]
# Re-run it with more ENGINES after adding sandbox nodes: the certificate names each engine.
set -eu
if [ $# -lt 3 ]; then
  echo "usage: $0 OUT NAMESPACE ENGINES [EXTRA_DNS_NAME...]" >&2
  exit 2
fi
out=$1 ns=$2 engines=$3
shift 3
mkdir -p "$out"
umask 077
sans=""
n=0
while [ "$n" -lt "$engines" ]; do
  name="sandbox-engine-$n.sandbox-engine"
  sans="$sans,DNS:$name,DNS:$name.$ns.svc,DNS:$name.$ns.svc.cluster.local"
  n=$((n + 1))
done
for extra in "$@"; do sans="$sans,DNS:$extra"; done
sans=${sans#,}
if [ ! -s "$out/ca.pem" ]; then  # one CA per overlay: re-running keeps it, so clients keep trusting
  openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=verifiable-rewards sandbox CA" \
    -keyout "$out/ca-key.pem" -out "$out/ca.pem" 2>/dev/null
fi
openssl req -newkey rsa:3072 -nodes -subj "/CN=sandbox-engine" \
  -keyout "$out/server-key.pem" -out "$out/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' \
  "$sans" > "$out/server.ext"
openssl x509 -req -in "$out/server.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" \
  -CAcreateserial -days 825 -extfile "$out/server.ext" -out "$out/server-cert.pem" 2>/dev/null
mkdir -p "$out/client"
openssl req -newkey rsa:3072 -nodes -subj "/CN=reward-server" \
  -keyout "$out/client/key.pem" -out "$out/client.csr" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' > "$out/client.ext"
openssl x509 -req -in "$out/client.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" \
  -CAcreateserial -days 825 -extfile "$out/client.ext" -out "$out/client/cert.pem" 2>/dev/null
cp "$out/ca.pem" "$out/client/ca.pem"
rm -f "$out/server.csr" "$out/server.ext" "$out/client.csr" "$out/client.ext" "$out/ca.srl"
if [ ! -s "$out/api-token" ]; then
  openssl rand -hex 32 | tr -d '\n' > "$out/api-token"
fi
echo "wrote $out: ca.pem, ca-key.pem, server-cert.pem, server-key.pem, client/, api-token"

"""deploy/k8s/ as an operator renders it, checked offline (no cluster): every overlay renders
with ``kubectl kustomize``, every object is valid against the Kubernetes API's schemas, and
the manifests agree with the code they deploy: probes and the scrape path are routes the app
serves, every ``REWARD_SERVER_*`` variable is a setting with a valid value, ports, selectors
and Secret references line up, and the engines the server is given are the engines there are,
each named in the certificate make-certs.sh writes."""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID

from reward_server import metrics
from reward_server.app import create_app
from reward_server.middleware import BearerAuth
from reward_server.settings_doc import builtin_settings_class
from sandbox.tls import check_cert_path
from tests.conftest import ROOT

K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.32"  # the kubectl CI has (Debian's kubernetes-client), its API's schemas
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
NAMESPACES = {"dev": "verifiable-rewards-dev"}  # make-certs.sh's argument; others: production's
# Variables of the server's container that are not its settings, each read by a library
# (none now: the engines' CA is the server's own setting, REWARD_SERVER_SANDBOX_TLS_CERT_PATH)
NOT_SETTINGS: dict[str, str] = {}
SERVER, ENGINE = "reward-server", "sandbox-engine"
TLS_CERT_PATH = "REWARD_SERVER_SANDBOX_TLS_CERT_PATH"


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl is not installed: the manifests in deploy/k8s/ are rendered with "
                    "`kubectl kustomize` (apt-get install kubernetes-client)")
    return path


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of deploy/k8s/ as a clean checkout has it: no secrets."""
    root = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S, root, ignore=shutil.ignore_patterns("secrets"))
    return root


def _make_secrets(tree: Path, overlay: str) -> Path:
    out = tree / "overlays" / overlay / "secrets"
    namespace = NAMESPACES.get(overlay, "verifiable-rewards")
    subprocess.run(["sh", str(tree / "make-certs.sh"), str(out), namespace, "1"],
                   check=True, capture_output=True, timeout=60)
    return out


def _render(tree: Path, overlay: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_kubectl(), "kustomize", str(tree / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def rendered(tree: Path) -> dict[str, list[dict[str, Any]]]:
    """Each overlay's objects (production-request-metric uses production's secrets; the
    certificate's names are test_make_certs_names_every_engine's)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for overlay in ("dev", "production"):  # the way docs/deploy.md says
        _make_secrets(tree, overlay)
    for overlay in OVERLAYS:
        result = _render(tree, overlay)
        assert result.returncode == 0, f"{overlay}: {result.stderr}"
        out[overlay] = [d for d in yaml.safe_load_all(result.stdout) if d]
    return out


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind}/{name}"
    return found[0]


def _named(objects: list[dict[str, Any]], kind: str, prefix: str) -> dict[str, Any]:
    """A generated object (its name has kustomize's hash suffix)."""
    found = [o for o in objects if o["kind"] == kind
             and re.fullmatch(rf"{re.escape(prefix)}(-[a-z0-9]{{10}})?", o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind}/{prefix}"
    return found[0]


def _container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, name
    return found[0]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _secret_files(objects: list[dict[str, Any]], workload: dict[str, Any],
                  container: dict[str, Any], directory: str) -> dict[str, bytes]:
    """The files ``container`` sees in ``directory``: the Secret mounted there, decoded."""
    mount = next((m for m in container.get("volumeMounts", [])
                  if Path(m["mountPath"]) == Path(directory)), None)
    assert mount is not None, f"{container['name']} mounts nothing at {directory}"
    volume = next(v for v in workload["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == mount["name"])
    secret = _named(objects, "Secret", volume["secret"]["secretName"])
    return {name: base64.b64decode(data) for name, data in secret.get("data", {}).items()}


def _write(files: dict[str, bytes], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


def _port(container: dict[str, Any], name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert name in ports, f"{container['name']} has no port {name!r}: {ports}"
    return ports[name]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


overlays = pytest.mark.parametrize("overlay", OVERLAYS)


def test_the_overlays_exist() -> None:
    assert {"dev", "production", "production-request-metric"} <= set(OVERLAYS), OVERLAYS


def test_an_overlay_without_its_secrets_does_not_render(tmp_path: Path) -> None:
    """No token or key ships in the repository, and none is invented: kustomize stops,
    naming the file make-certs.sh would have written."""
    shutil.copytree(K8S, tmp_path / "k8s", ignore=shutil.ignore_patterns("secrets"))
    result = _render(tmp_path / "k8s", "production")
    assert result.returncode != 0
    assert "secrets/api-token" in result.stderr, result.stderr


@overlays
def test_every_object_is_valid_for_the_kubernetes_api(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    kinds = set()
    for obj in rendered[overlay]:
        # strict: a misspelt or misplaced field is an error, not silently dropped
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        kinds.add(obj["kind"])
    assert kinds >= {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
                     "StatefulSet", "NetworkPolicy", "Secret"}, kinds


def test_a_wrong_field_fails_the_schema_check(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The check above can fail: a probe's port misspelt is refused."""
    deployment = _one(rendered["production"], "Deployment", SERVER)
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["prot"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@functools.cache
def _get_routes() -> frozenset[str]:
    """The paths the app answers GET on (its OpenAPI document: routers are included lazily,
    so app.routes does not list them). The lifespan does not run: no pool starts."""
    app = create_app(builtin_settings_class()())
    return frozenset(p for p, ops in app.openapi()["paths"].items() if "get" in ops)


def _open_without_token(path: str) -> bool:
    """Whether the server's own auth middleware lets ``path`` through with no token."""
    reached: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    async def send(message: Any) -> None:
        pass

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "path": path, "headers": [], "method": "GET"}
    asyncio.run(BearerAuth(inner, "a-token")(scope, receive, send))
    return reached == [path]


@overlays
def test_probes_and_scrape_path_are_routes_the_app_serves(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    deployment = _one(rendered[overlay], "Deployment", SERVER)
    server = _container(deployment, SERVER)
    routes = _get_routes()
    http_port = _port(server, "http")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = server[probe]["httpGet"]
        assert get["path"] in routes, (probe, get["path"], sorted(routes))
        # the kubelet sends no token: a probe of a guarded route would fail once one is set
        assert _open_without_token(get["path"]), (probe, get["path"])
        assert get["port"] in ("http", http_port), (probe, get["port"])
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] in routes
    assert int(annotations["prometheus.io/port"]) == http_port


def test_a_route_the_app_lacks_is_seen() -> None:
    routes = _get_routes()
    assert "/healthz" in routes and "/metrics" in routes
    # no readiness route of its own: the readiness probe uses /healthz; when one is added,
    # this fails so the probe moves to it
    assert "/readyz" not in routes
    assert not _open_without_token("/metrics")


@overlays
def test_every_server_variable_is_a_setting_with_a_valid_value(
        rendered: dict[str, list[dict[str, Any]]], overlay: str,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings_cls = builtin_settings_class()
    names = {f"REWARD_SERVER_{name.upper()}": name for name in settings_cls.model_fields}
    server = _container(_one(rendered[overlay], "Deployment", SERVER), SERVER)
    env = _env(server)
    unknown = [k for k in env if k not in names and k not in NOT_SETTINGS]
    assert not unknown, f"not settings of reward_server/settings.py: {unknown}"
    for key in [k for k in os.environ if k.startswith("REWARD_SERVER_")]:
        monkeypatch.delenv(key)
    deployment = _one(rendered[overlay], "Deployment", SERVER)
    # the client TLS directory is checked as the pod has it: the mounted Secret's files
    env[TLS_CERT_PATH] = str(_write(_secret_files(rendered[overlay], deployment, server,
                                                  env[TLS_CERT_PATH]), tmp_path / "tls"))
    for key, value in env.items():
        monkeypatch.setenv(key, value if isinstance(value, str) else "from-a-secret")
    settings = settings_cls(_env_file=None)  # a bad value raises, naming the setting
    assert settings.port == _port(server, "http")
    assert settings.host == "0.0.0.0"
    assert settings.api_token is not None
    assert settings.sandbox_tls_cert_path == env[TLS_CERT_PATH]


@overlays
def test_services_and_budgets_select_the_pods_and_their_ports(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    deployment = _one(objects, "Deployment", SERVER)
    engines = _one(objects, "StatefulSet", ENGINE)
    for workload in (deployment, engines):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert _matches(workload["spec"]["selector"]["matchLabels"], labels)
    server_labels = deployment["spec"]["template"]["metadata"]["labels"]
    engine_labels = engines["spec"]["template"]["metadata"]["labels"]
    service = _one(objects, "Service", SERVER)
    assert _matches(service["spec"]["selector"], server_labels)
    assert not _matches(service["spec"]["selector"], engine_labels)
    for port in service["spec"]["ports"]:
        _port(_container(deployment, SERVER), port["targetPort"])
    pdb = _one(objects, "PodDisruptionBudget", SERVER)
    assert _matches(pdb["spec"]["selector"]["matchLabels"], server_labels)
    hpa = _one(objects, "HorizontalPodAutoscaler", SERVER)
    assert hpa["spec"]["scaleTargetRef"]["name"] == SERVER
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    headless = _one(objects, "Service", engines["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"  # per-pod names, no balancing
    assert _matches(headless["spec"]["selector"], engine_labels)
    dockerd = _container(engines, "dockerd")
    for port in headless["spec"]["ports"]:
        assert _port(dockerd, port["targetPort"]) == port["port"]
    listen = [a.split("=", 1)[1] for a in dockerd["args"] if a.startswith("--host=tcp://")]
    assert [urlsplit(u).port for u in listen] == [_port(dockerd, "docker-tls")]


@overlays
def test_only_the_server_pods_reach_the_engines(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    server_labels = _one(objects, "Deployment", SERVER)["spec"]["template"]["metadata"]["labels"]
    engines = _one(objects, "StatefulSet", ENGINE)
    engine_labels = engines["spec"]["template"]["metadata"]["labels"]
    policy = _one(objects, "NetworkPolicy", ENGINE)["spec"]
    assert _matches(policy["podSelector"]["matchLabels"], engine_labels)
    assert "Ingress" in policy["policyTypes"]
    engine_port = _port(_container(engines, "dockerd"), "docker-tls")
    assert policy["ingress"], "an empty ingress list admits no one; none at all is the goal"
    for rule in policy["ingress"]:
        assert rule["from"] and all(set(peer) == {"podSelector"} for peer in rule["from"]), rule
        for peer in rule["from"]:
            assert _matches(peer["podSelector"]["matchLabels"], server_labels)
            assert not _matches(peer["podSelector"]["matchLabels"], engine_labels)
        assert [p["port"] for p in rule["ports"]] == [engine_port]


def _secret_keys(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    return {o["metadata"]["name"]: set(o.get("data", {})) | set(o.get("stringData", {}))
            for o in objects if o["kind"] == "Secret"}


@overlays
def test_every_secret_referenced_exists_with_its_keys(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    secrets = _secret_keys(objects)
    token = _named(objects, "Secret", "reward-server-api-token")["metadata"]["name"]
    server = _container(_one(objects, "Deployment", SERVER), SERVER)
    ref = _env(server)["REWARD_SERVER_API_TOKEN"]["secretKeyRef"]
    assert ref["name"] == token and ref["key"] in secrets[token]
    for kind, name in (("Deployment", SERVER), ("StatefulSet", ENGINE)):
        pod = _one(objects, kind, name)["spec"]["template"]["spec"]
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, volume
    # what the engine and the server read from their secrets is there
    engines = _one(objects, "StatefulSet", ENGINE)
    dockerd = _container(engines, "dockerd")
    mounts = {m["name"]: m["mountPath"] for m in dockerd["volumeMounts"]}
    volumes = {v["name"]: v for v in engines["spec"]["template"]["spec"]["volumes"]}
    for arg in dockerd["args"]:
        if arg.startswith(("--tlscacert=", "--tlscert=", "--tlskey=")):
            path = Path(arg.split("=", 1)[1])
            volume = next(n for n, m in mounts.items() if path.parent == Path(m))
            assert path.name in secrets[volumes[volume]["secret"]["secretName"]], arg
    # the server's TLS directory: the CA and its client certificate, no engine key
    client = _secret_files(objects, _one(objects, "Deployment", SERVER), server,
                           _env(server)[TLS_CERT_PATH])
    assert set(client) == {"ca.pem", "cert.pem", "key.pem"}, sorted(client)
    engine_tls = _secret_files(objects, engines, dockerd, "/etc/docker-tls")
    assert client["key.pem"] != engine_tls["server-key.pem"]


def _engine_hosts(objects: list[dict[str, Any]]) -> list[str]:
    server = _container(_one(objects, "Deployment", SERVER), SERVER)
    raw = _env(server).get("REWARD_SERVER_SANDBOX_DOCKER_HOSTS")
    assert raw, "the server is given no engines: it would use a local socket it has not got"
    # read as the server reads it (the setting's own comma splitting)
    return builtin_settings_class()(_env_file=None, sandbox_docker_hosts=raw).sandbox_docker_hosts


@overlays
def test_the_server_is_given_every_engine_by_its_stable_name_over_tls(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    engines = _one(objects, "StatefulSet", ENGINE)
    service = engines["spec"]["serviceName"]
    port = _one(objects, "Service", service)["spec"]["ports"][0]["port"]
    expected = [f"https://{ENGINE}-{n}.{service}:{port}"
                for n in range(engines["spec"]["replicas"])]
    assert _engine_hosts(objects) == expected


def _flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return value


def _openssl_verify(ca: Path, cert: Path, purpose: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-purpose", purpose,
                           str(cert)], capture_output=True, text=True, timeout=30)


@overlays
def test_the_engines_and_the_servers_verify_each_other(
        rendered: dict[str, list[dict[str, Any]]], overlay: str, tmp_path: Path) -> None:
    """dockerd --tlsverify asks every client for a certificate its --tlscacert signed: the
    servers' client certificate is one (for client use), and the servers' CA signed the
    engines' certificate (for server use). Each file read as its pod mounts it."""
    objects = rendered[overlay]
    engines = _one(objects, "StatefulSet", ENGINE)
    dockerd = _container(engines, "dockerd")
    assert "--tlsverify" in dockerd["args"], dockerd["args"]
    engine_side = {}
    for flag in ("--tlscacert", "--tlscert"):
        path = Path(_flag(dockerd["args"], flag))
        files = _secret_files(objects, engines, dockerd, str(path.parent))
        engine_side[flag] = _write({path.name: files[path.name]}, tmp_path / flag) / path.name
    deployment = _one(objects, "Deployment", SERVER)
    server = _container(deployment, SERVER)
    client = _write(_secret_files(objects, deployment, server, _env(server)[TLS_CERT_PATH]),
                    tmp_path / "client")
    accepted = _openssl_verify(engine_side["--tlscacert"], client / "cert.pem", "sslclient")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    trusted = _openssl_verify(client / "ca.pem", engine_side["--tlscert"], "sslserver")
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    # and the check can fail: the engines' own certificate is no client's
    refused = _openssl_verify(engine_side["--tlscacert"], engine_side["--tlscert"], "sslclient")
    assert refused.returncode != 0, refused.stdout


@overlays
def test_the_engines_hold_the_image_the_server_asks_for(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    server = _container(_one(objects, "Deployment", SERVER), SERVER)
    image = _env(server).get("REWARD_SERVER_SANDBOX_IMAGE") or \
        builtin_settings_class().model_fields["sandbox_image"].default
    engines = _one(objects, "StatefulSet", ENGINE)
    assert _env(_container(engines, "image-loader"))["SANDBOX_IMAGE"] == image
    assert image in _container(engines, "dockerd")["readinessProbe"]["exec"]["command"]


def _cpu(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


@overlays
def test_an_engine_has_a_cpu_for_every_container_it_may_hold(
        rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    """Time limits are wall-clock: an engine running more programs than it has CPUs would
    time correct programs out. Each replica keeps POOL_SIZE containers on every engine."""
    objects = rendered[overlay]
    settings_cls = builtin_settings_class()
    server = _container(_one(objects, "Deployment", SERVER), SERVER)
    env = _env(server)
    fields = settings_cls.model_fields

    def setting(name: str) -> float:
        return float(env.get(f"REWARD_SERVER_{name.upper()}", fields[name].default))

    processes = _one(objects, "HorizontalPodAutoscaler", SERVER)["spec"]["maxReplicas"] * \
        setting("workers")
    containers = processes * setting("sandbox_pool_size")
    dockerd = _container(_one(objects, "StatefulSet", ENGINE), "dockerd")
    assert _cpu(dockerd["resources"]["requests"]["cpu"]) >= containers * setting("sandbox_cpus")
    memory_gi = float(dockerd["resources"]["limits"]["memory"].removesuffix("Gi"))
    assert memory_gi * 1024 >= containers * setting("sandbox_memory_mb")


def test_production_engines_run_on_the_sandbox_pool_only(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    for overlay in OVERLAYS:
        pod = _one(rendered[overlay], "StatefulSet", ENGINE)["spec"]["template"]["spec"]
        server_pod = _one(rendered[overlay], "Deployment", SERVER)["spec"]["template"]["spec"]
        assert "tolerations" not in server_pod  # servers never land on the sandbox nodes
        if overlay == "dev":  # one node, no dedicated pool
            assert "nodeSelector" not in pod and "tolerations" not in pod
            continue
        (key, value), = pod["nodeSelector"].items()
        assert {"key": key, "operator": "Equal", "value": value,
                "effect": "NoSchedule"} in pod["tolerations"]
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert anti[0]["topologyKey"] == "kubernetes.io/hostname"  # one engine per node


def test_the_request_metric_overlay_scales_on_the_adapters_metric(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    hpa = _one(rendered["production-request-metric"], "HorizontalPodAutoscaler", SERVER)
    (metric,) = hpa["spec"]["metrics"]
    rules = yaml.safe_load((K8S / "overlays" / "production-request-metric" /
                            "prometheus-adapter-rules.yaml").read_text())["rules"]
    assert metric["pods"]["metric"]["name"] in {r["name"]["as"] for r in rules}
    series = rules[0]["seriesQuery"].split("{")[0]
    # the gauge the adapter reads is one the server exports
    assert series in {m.name for m in metrics.QUEUE_WAITING.describe()}


@pytest.mark.parametrize("engines", [1, 4])
def test_make_certs_names_every_engine(tmp_path: Path, engines: int) -> None:
    """The engines' certificate is signed by the CA the server trusts and names each engine as
    the server addresses it (a hostname check fails otherwise)."""
    out = tmp_path / "secrets"
    subprocess.run(["sh", str(K8S / "make-certs.sh"), str(out), "rl", str(engines)],
                   check=True, capture_output=True, timeout=60)
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca.pem"),
                             str(out / "server-cert.pem")], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    cert = x509.load_pem_x509_certificate((out / "server-cert.pem").read_bytes())
    names = cert.extensions.get_extension_for_oid(
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value.get_values_for_type(x509.DNSName)
    for n in range(engines):
        assert f"sandbox-engine-{n}.sandbox-engine" in names
        assert f"sandbox-engine-{n}.sandbox-engine.rl.svc.cluster.local" in names
    assert f"sandbox-engine-{engines}.sandbox-engine" not in names
    # the servers' client certificate, in a DOCKER_CERT_PATH directory, for client use only
    client = x509.load_pem_x509_certificate((out / "client" / "cert.pem").read_bytes())
    usage = client.extensions.get_extension_for_oid(ExtensionOID.EXTENDED_KEY_USAGE).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert (out / "client" / "ca.pem").read_bytes() == (out / "ca.pem").read_bytes()
    check_cert_path(str(out / "client"))
    assert len((out / "api-token").read_text()) == 64

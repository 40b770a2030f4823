# The reward server image. It installs the project's wheels, built on the host by
# deploy/build.sh, with --no-index: no step needs the network, so the same file builds FROM
# python:3.11-slim where a registry answers and FROM a debootstrapped Debian offline.
ARG BASE=python:3.11-slim
FROM ${BASE}
COPY .wheels/ /tmp/wheels/
COPY entrypoint.sh /usr/local/bin/reward-server-entrypoint
RUN python3 "$(ls /tmp/wheels/pip-*.whl)/pip" install --no-cache-dir --no-index \
      --find-links /tmp/wheels --break-system-packages --root-user-action=ignore \
      "verifiable-rewards[server]" \
 && rm -rf /tmp/wheels \
 && groupadd -g 10002 reward \
 && useradd -u 10002 -g 10002 -M -d /var/lib/reward-server -s /usr/sbin/nologin reward \
 && mkdir -p /opt/plugins && chown reward:reward /opt/plugins \
 && chmod 755 /usr/local/bin/reward-server-entrypoint
# Plug-in verifiers dropped into the /opt/plugins volume are importable (REWARD_SERVER_PLUGINS)
ENV REWARD_SERVER_HOST=0.0.0.0 REWARD_SERVER_PORT=8000 PYTHONPATH=/opt/plugins \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=3)"]
ENTRYPOINT ["reward-server-entrypoint"]
CMD ["reward-server"]

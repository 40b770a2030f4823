# The reward server image (build context: the repository root; see .dockerignore).
# deploy/build.sh builds the project's wheels on the host first; they are installed with
# --no-index, so no step needs the network and the same file builds FROM a debootstrapped
# Debian offline. Without those wheels (a plain `docker compose up -d --build` where a
# registry answers) the project is installed from its source and PyPI instead.
ARG BASE=python:3.11-slim
FROM ${BASE}
COPY deploy/.wheels/ /tmp/wheels/
COPY pyproject.toml README.md /tmp/src/
COPY reward_server /tmp/src/reward_server
COPY sandbox /tmp/src/sandbox
COPY trainer /tmp/src/trainer
COPY deploy/entrypoint.sh /usr/local/bin/reward-server-entrypoint
RUN if ls /tmp/wheels/pip-*.whl >/dev/null 2>&1; then \
      python3 "$(ls /tmp/wheels/pip-*.whl)/pip" install --no-cache-dir --no-index \
        --find-links /tmp/wheels --break-system-packages --root-user-action=ignore \
        "verifiable-rewards[server]"; \
    elif python3 -m pip --version >/dev/null 2>&1; then \
      python3 -m pip install --no-cache-dir --root-user-action=ignore "/tmp/src[server]"; \
    else \
      echo "no wheels in deploy/.wheels and no pip in the base: run bash deploy/build.sh" >&2; \
      exit 1; \
    fi \
 && rm -rf /tmp/wheels /tmp/src \
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

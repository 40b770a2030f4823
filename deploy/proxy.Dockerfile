# The load balancer in front of the reward-server replicas: nginx with deploy/nginx.conf.
# nginx:1.27-alpine where a registry answers; offline, a debootstrapped Debian with nginx.
ARG BASE=nginx:1.27-alpine
FROM ${BASE}
COPY nginx.conf /etc/nginx/nginx.conf
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --retries=3 \
  CMD ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/healthz"]
CMD ["nginx", "-g", "daemon off;"]

# syntax=docker/dockerfile:1
# The ebbtide image: one image for every service, run as `ebbtide run <service>` (collector,
# state, forecaster, optimizer, actuator). Used by deploy/compose.yaml and the Helm chart.
#   docker build -t ebbtide:0.1.0 .
# Kafka is external (EBBTIDE_KAFKA__BOOTSTRAP_SERVERS); no JVM in the image.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
# Wheels of ebbtide and of every dependency (confluent-kafka, highspy, statsmodels... ship manylinux wheels).
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp EBBTIDE_CACHE_DIR=/tmp/ebbtide MPLCONFIGDIR=/tmp/matplotlib \
    EBBTIDE_METRICS_PORT=9095
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels ebbtide \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /tmp ebbtide
USER 10001:10001
# Prometheus metrics of every service (/metrics; the chart's probes use it too).
EXPOSE 9095
ENTRYPOINT ["ebbtide"]
CMD ["--help"]

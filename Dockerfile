# psyq's image: `psyq server` (the engine over TCP) and `psyq dashboard`, with every
# store's client (Redis, Postgres), the dashboard and uvloop: `pip install 'psyq[server]'`.
# Build: `make image` (scripts/image: docker or podman, the base below, the wheelhouse). Run:
# docs/operations.md (the volume, the token, TLS, probes; compose and Kubernetes examples).
#
# BASE: any Debian-like image with python3 (3.11 or newer), its venv module and useradd:
# the official python:3.12-slim where a registry serves it, or the base scripts/image makes
# from Debian's own packages (mmdebstrap) where none does.
ARG BASE=python:3.12-slim

FROM ${BASE} AS build
# psyq and its server extra in a virtualenv of their own, from the wheelhouse scripts/image
# makes (the build context: wheels/), with no network; the image copies the virtualenv
# whole: no wheel, build tree or pip cache reaches it
COPY wheels /wheels
RUN python3 -m venv /opt/psyq \
    && /opt/psyq/bin/pip install --no-cache-dir --disable-pip-version-check --no-index \
        --find-links /wheels "psyq[server]"

FROM ${BASE}
# a system user of its own (uid 10001), its home the data directory (SQLite files)
RUN useradd --system --uid 10001 --create-home --home-dir /data psyq
COPY --from=build /opt/psyq /opt/psyq
ENV PATH=/opt/psyq/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
WORKDIR /data
VOLUME /data
# 6789: psyq://, 8765: the dashboard, 8080: health probes (--health-port)
EXPOSE 6789 8765 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["psyq"]
CMD ["server", "--host", "0.0.0.0", "--data", "/data/psyq.db", "--durability", "durable", \
     "--health-port", "8080"]

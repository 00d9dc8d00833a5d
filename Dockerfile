# psyq's image: `psyq server` (the engine over TCP) and `psyq dashboard`, with every
# store's client (Redis, Postgres), the dashboard and uvloop: `pip install 'psyq[server]'`.
# Build: docker build -t psyq .   Run: docs/operations.md (compose and Kubernetes examples).
ARG PYTHON=3.12

FROM python:${PYTHON}-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY psyq ./psyq
COPY migrate ./migrate
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[server]"

FROM python:${PYTHON}-slim
# a system user of its own (uid 10001), its home the data directory (SQLite files)
RUN useradd --system --uid 10001 --create-home --home-dir /data psyq
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "psyq[server]" \
    && rm -rf /wheels
USER 10001
WORKDIR /data
ENV PYTHONUNBUFFERED=1
# 6789: psyq://, 8765: the dashboard, 8080: health probes (--health-port)
EXPOSE 6789 8765 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["psyq"]
CMD ["server", "--host", "0.0.0.0", "--data", "/data/psyq.db", "--durability", "durable", \
     "--health-port", "8080"]

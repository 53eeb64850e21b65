# syntax=docker/dockerfile:1
#
# Crewlet image: the `crewlet` CLI (engine, `run api`, migrate, ...) and the
# standalone `crewlet-api` binary on a slim Debian runtime, as a non-root user.
#
#   docker build -t crewlet:local .
#   docker run --rm -v $PWD/config.yaml:/etc/crewlet/config.yaml:ro crewlet:local
#
# Needs BuildKit (the default builder of current Docker) for the cache mounts.

# ---- build ------------------------------------------------------------------
FROM rust:1-bookworm AS builder

# The `pulsar` crate generates its protocol code with protoc at build time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# Binaries to build; `--build-arg BINARIES=crewlet` builds only the CLI.
ARG BINARIES="crewlet crewlet-api"

# Registry, git checkouts and target/ live in BuildKit cache mounts, so a
# rebuild after a source change recompiles only the crates that changed. The
# binaries are copied out of the cache mount before the step ends.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    set -eu; \
    bins=""; for b in $BINARIES; do bins="$bins --bin $b"; done; \
    cargo build --release --locked $bins; \
    mkdir -p /out; \
    for b in $BINARIES; do cp "target/release/$b" /out/; done

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim AS runtime

# ca-certificates: TLS to model providers, pulsar+ssl, managed PostgreSQL.
# curl: the HEALTHCHECK below.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 crewlet \
 && useradd --system --uid 10001 --gid crewlet --home-dir /var/lib/crewlet \
      --create-home --shell /usr/sbin/nologin crewlet

COPY --from=builder /out/ /usr/local/bin/

USER crewlet
WORKDIR /var/lib/crewlet

# The API's default port (`crewlet run api`, `crewlet-api`).
EXPOSE 8000

# /health answers 200 while the process is alive. HEALTHCHECK_PORT points the
# probe at another port, e.g. the engine's loopback-only embedded API.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=4 \
  CMD curl -fsS -o /dev/null "http://127.0.0.1:${HEALTHCHECK_PORT:-8000}/health" || exit 1

ENTRYPOINT ["crewlet"]
CMD ["run", "/etc/crewlet/config.yaml"]

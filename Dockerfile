# Troupe node image: `docker build -t troupe-node .`
# docker-compose.yml builds it for its node services.

# --- build -------------------------------------------------------------------
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so code changes do not invalidate the module cache layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Pure Go (the embedded SQLite is modernc.org/sqlite): a static binary.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/node ./cmd/node \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/replay ./cmd/replay \
 && mkdir -p /out/data

# --- run ---------------------------------------------------------------------
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/node /out/replay /usr/local/bin/
# The embedded event log and vector index live here when no cluster backends
# are configured; mount a volume to keep them.
COPY --from=build --chown=nonroot:nonroot /out/data /data
ENV TROUPE_DATA=/data
WORKDIR /data
USER nonroot:nonroot
EXPOSE 8080
CMD ["node", "serve", "--http", "0.0.0.0:8080"]

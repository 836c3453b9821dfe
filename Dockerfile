# Dockerfile: the splicer daemon on a distroless base. Run it on the host's network with the capabilities its engines need:
#   docker run --rm --network host --cap-add NET_ADMIN --cap-add BPF --cap-add PERFMON --cap-add NET_RAW \
#     -v /sys/fs/bpf:/sys/fs/bpf -v $PWD/splicer.yaml:/etc/splicer/splicer.yaml:ro splicer
# Without the capabilities it runs the copy and pipe engines only.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=unknown
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/splicer/splicer/internal/buildinfo.Version=${VERSION} -X github.com/splicer/splicer/internal/buildinfo.Revision=${REVISION}" \
	-o /out/splicer ./cmd/splicer

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/splicer /usr/bin/splicer
COPY packaging/splicer.yaml /etc/splicer/splicer.yaml
EXPOSE 9901
ENTRYPOINT ["/usr/bin/splicer"]
CMD ["run", "--config", "/etc/splicer/splicer.yaml"]

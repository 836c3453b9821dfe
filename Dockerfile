# Dockerfile: the splicer daemon from source on a distroless base, as the image's nonroot user (65532); packaging/docker/Dockerfile builds the
# same image from release binaries. Run it on the host's network with the capabilities its engines need:
#   docker run --rm --network host --cap-add NET_ADMIN --cap-add BPF --cap-add PERFMON --cap-add NET_RAW \
#     -v /sys/fs/bpf:/sys/fs/bpf -v $PWD/splicer.yaml:/etc/splicer/splicer.yaml:ro splicer
# Without the capabilities it runs the copy and pipe engines only. Engine ip pins under /sys/fs/bpf/splicer, which
# must belong to uid 65532 (deploy/kubernetes/daemonset.yaml's init container sees to it).
FROM golang:1.26-bookworm AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libcap2-bin
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=unknown
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X github.com/splicer/splicer/internal/buildinfo.Version=${VERSION} -X github.com/splicer/splicer/internal/buildinfo.Revision=${REVISION}" \
	-o /out/splicer ./cmd/splicer
# The engines' capabilities as permitted file capabilities, none effective: a process not run as root gets them
# from the binary (Kubernetes has no ambient capabilities), keeps those its configuration needs and raises them
# itself; a container not granted one still starts (an effective file capability it could not have would refuse
# the exec).
RUN setcap cap_net_admin,cap_bpf,cap_perfmon,cap_net_raw,cap_net_bind_service+p /out/splicer

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/splicer /usr/bin/splicer
COPY packaging/splicer.yaml /etc/splicer/splicer.yaml
USER 65532:65532
EXPOSE 9901
ENTRYPOINT ["/usr/bin/splicer"]
CMD ["run", "--config", "/etc/splicer/splicer.yaml"]

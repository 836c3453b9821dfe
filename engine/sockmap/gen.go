// Code generation for the sk_skb programs: bpf2go compiles bpf/splice.c into splice_bpfel.{go,o}.

package sockmap

//go:generate go run github.com/splicer/splicer/internal/bpf2go -type ctl -type flow -type event -type event_kind -type counter splice bpf/splice.c

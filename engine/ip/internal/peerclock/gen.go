// Code generation for the peerclock program: bpf2go compiles bpf/peerclock.c into peerclock_bpfel.{go,o}.

package peerclock

//go:generate go run github.com/splicer/splicer/internal/bpf2go -type peerclock_family -type peerclock_layout -type peerclock_sock -type peerclock_query peerclock bpf/peerclock.c

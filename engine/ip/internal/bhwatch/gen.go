// Code generation for the bhwatch programs: bpf2go compiles bpf/bhwatch.c into bhwatch_bpfel.{go,o}.

package bhwatch

//go:generate go run github.com/splicer/splicer/internal/bpf2go -type bhwatch_cpu -type bhwatch_const bhwatch bpf/bhwatch.c

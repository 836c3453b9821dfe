// Code generation for the sk_reuseport program: bpf2go compiles bpf/spread.c into spread_bpfel.{go,o}.

package reuseport

//go:generate go run github.com/splicer/splicer/internal/bpf2go spread bpf/spread.c

// Code generation for the splice tc program: bpf2go compiles bpf/splice.c into splice_bpfel.{go,o}.

package ip

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type splice_key -type splice_dir splice bpf/splice.c -- -I/usr/include/x86_64-linux-gnu

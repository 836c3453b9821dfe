// Code generation for the splice tc program: bpf2go compiles bpf/splice.c into splice_bpfel.{go,o}.

package datapath

//go:generate go run github.com/splicer/splicer/internal/bpf2go -type splice_key -type splice_dir -type splice_mode -type splice_opt -type splice_flag -type splice_family -type splice_ctl_layout -type splice_time -type splice_tcp_flag -type splice_event_kind -type splice_counter -type splice_event -type splice_kept splice bpf/splice.c

// The tcx programs attached at the lab's devices, for tests that check what a datapath left behind.

package lab

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// TCXPrograms lists the programs attached at the end's interface at attach
// (tcx ingress or egress).
func (e End) TCXPrograms(attach ebpf.AttachType) ([]link.AttachedProgram, error) {
	ifindex, err := e.Index()
	if err != nil {
		return nil, err
	}
	var res *link.QueryResult
	err = e.NS.Do(func() (err error) {
		res, err = link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: attach})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res.Programs, nil
}

// FwdIngressPrograms counts the programs at tcx ingress of the
// forwarder's two devices (toward the client and toward the server).
func (l *Lab) FwdIngressPrograms() (int, error) {
	n := 0
	for _, end := range []End{l.ClientLink().ServerSide, l.ServerLink().ClientSide} {
		progs, err := end.TCXPrograms(ebpf.AttachTCXIngress)
		if err != nil {
			return 0, err
		}
		n += len(progs)
	}
	return n, nil
}

// FwdIngressProgramsT is FwdIngressPrograms for a test: a failure to
// list the programs fails tb.
func (l *Lab) FwdIngressProgramsT(tb testing.TB) int {
	tb.Helper()
	n, err := l.FwdIngressPrograms()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// Password checks are bounded: with every slot taken a check waits, and gives up when its context (the handshake timeout) ends.

package passwd

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestChecksAreBounded(t *testing.T) {
	h, err := New("pw", MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(map[string]string{"alice": h})
	if err != nil {
		t.Fatal(err)
	}
	for range cap(v.slots) {
		v.slots <- struct{}{} // every slot busy
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ok, err := v.CheckContext(ctx, "alice", "pw"); ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with no free slot: %v, %v; want a timeout", ok, err)
	}
	<-v.slots
	if ok, err := v.CheckContext(context.Background(), "alice", "pw"); !ok || err != nil {
		t.Fatalf("with a free slot: %v, %v", ok, err)
	}
}

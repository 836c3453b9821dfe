// Tests of the drain's loss recovery decisions (takeAck, timedOut), without sockets: when the first unacknowledged owed segment goes again.

package ip

import (
	"testing"
	"time"
)

const testMSS = 1448

// sentOwed is a direction owing segs full segments from seq 1000, all sent
// at t0 and none acknowledged.
func sentOwed(tb testing.TB, segs int, t0 time.Time) *owed {
	tb.Helper()
	o := &owed{start: 1000, data: make([]byte, segs*testMSS), mss: testMSS, tx: sendState{rto0: drainMinRTO}}
	o.tx.acked, o.tx.lastMove, o.tx.rto = o.start, t0, o.tx.rto0
	o.tx.nxt = o.end()
	return o
}

// seg is the sequence number after the first n owed segments.
func seg(o *owed, n int) uint32 { return o.start + uint32(n*testMSS) }

// TestDrainRecoveryAfterTimeout: once a timeout has resent the first
// unacknowledged segment, each partial ACK resends the next at once, as
// after a duplicate-ACK retransmission, instead of a timeout later. A
// hole of many segments otherwise costs one timeout per segment (160 ms
// for one HTTP response in the lab).
func TestDrainRecoveryAfterTimeout(t *testing.T) {
	t0 := time.Now()
	o := sentOwed(t, 10, t0)
	if adv, resend := o.takeAck(seg(o, 3), 1, t0.Add(time.Millisecond)); !adv || resend {
		t.Fatalf("first ACK of 3 segments: advanced %v, resend %v; want true, false", adv, resend)
	}
	if o.timedOut(t0.Add(2 * time.Millisecond)) {
		t.Fatal("timed out before the timeout")
	}
	now := t0.Add(time.Millisecond + drainMinRTO)
	if !o.timedOut(now) {
		t.Fatal("no timeout 5 ms after the ACK last advanced")
	}
	if !o.tx.recovering || o.tx.recover != o.end() {
		t.Fatalf("after the timeout: recovering %v up to %d; want true up to %d", o.tx.recovering, o.tx.recover, o.end())
	}
	for n := 4; n < 10; n++ {
		now = now.Add(100 * time.Microsecond)
		adv, resend := o.takeAck(seg(o, n), uint64(n), now)
		if !adv || !resend {
			t.Fatalf("partial ACK of %d segments: advanced %v, resend %v; want both", n, adv, resend)
		}
		if o.timedOut(now) {
			t.Fatalf("partial ACK of %d segments: timed out as well", n)
		}
	}
	adv, resend := o.takeAck(o.end(), 10, now.Add(100*time.Microsecond))
	if !adv || resend || !o.tx.done || o.tx.recovering {
		t.Fatalf("last ACK: advanced %v, resend %v, done %v, recovering %v; want true, false, true, false", adv, resend, o.tx.done, o.tx.recovering)
	}
}

// TestDrainProbeIsNotRecovery: a timeout with only the segment it resends
// outstanding (a window probe, or the last segment) enters no recovery, so
// the receiver's answer resends nothing.
func TestDrainProbeIsNotRecovery(t *testing.T) {
	t0 := time.Now()
	o := sentOwed(t, 1, t0)
	if !o.timedOut(t0.Add(drainMinRTO)) {
		t.Fatal("no timeout")
	}
	if o.tx.recovering {
		t.Fatal("recovering after resending the only outstanding segment")
	}
	if o.tx.rto != 2*drainMinRTO {
		t.Fatalf("timeout after one expiry %v, want %v", o.tx.rto, 2*drainMinRTO)
	}
}

// TestDrainDuplicateAcks: dupAckThreshold packets from the receiver
// without the ACK advancing resend the first unacknowledged segment once
// and enter recovery; the ACK reaching the recovery point leaves it.
func TestDrainDuplicateAcks(t *testing.T) {
	t0 := time.Now()
	o := sentOwed(t, 4, t0)
	for p := uint64(1); p < dupAckThreshold; p++ {
		if _, resend := o.takeAck(o.start, p, t0); resend {
			t.Fatalf("resent after %d duplicate ACKs", p)
		}
	}
	if _, resend := o.takeAck(o.start, dupAckThreshold, t0); !resend || !o.tx.recovering {
		t.Fatalf("after %d duplicate ACKs: resend %v, recovering %v; want both", dupAckThreshold, resend, o.tx.recovering)
	}
	if _, resend := o.takeAck(o.start, dupAckThreshold+1, t0); resend {
		t.Fatal("resent again on a further duplicate ACK")
	}
	if _, resend := o.takeAck(o.end(), dupAckThreshold+2, t0); resend || o.tx.recovering || !o.tx.done {
		t.Fatalf("full ACK: resend %v, recovering %v, done %v; want false, false, true", resend, o.tx.recovering, o.tx.done)
	}
}

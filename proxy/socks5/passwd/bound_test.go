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

// A user who logged in moments ago gets in without a slot, so a flood of
// wrong passwords holding every slot does not lock them out; a wrong
// password, an unknown user and a login past RecentLoginTTL still wait.
func TestRecentLoginNeedsNoSlot(t *testing.T) {
	v, err := NewVerifier(map[string]string{"alice": must(NewBcrypt("pw", MinBcryptCost))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v.recent.now = func() time.Time { return now }
	if !v.Check("alice", "pw") {
		t.Fatal("alice's password refused")
	}
	for range cap(v.slots) {
		v.slots <- struct{}{}
	}
	check := func(user, pw string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return v.CheckContext(ctx, user, pw)
	}
	if ok, err := check("alice", "pw"); !ok || err != nil {
		t.Errorf("alice again with every slot busy: %v, %v; want in", ok, err)
	}
	for _, c := range [][2]string{{"alice", "wrong"}, {"bob", "pw"}} {
		if ok, err := check(c[0], c[1]); ok || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s/%s with every slot busy: %v, %v; want a wait for a slot", c[0], c[1], ok, err)
		}
	}
	now = now.Add(RecentLoginTTL + time.Second)
	if ok, err := check("alice", "pw"); ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("alice past RecentLoginTTL: %v, %v; want a wait for a slot", ok, err)
	}
}

// Unknown users are checked against a decoy of the dearest user's scheme
// and cost, so that no user name is told apart by a faster refusal.
func TestDecoyIsTheDearestScheme(t *testing.T) {
	v, err := NewVerifier(map[string]string{
		"cheap": must(New("pw", MinIterations)),
		"dear":  must(NewBcrypt("pw", MinBcryptCost+1)),
		"mid":   must(NewArgon2id("pw", Argon2Params{Memory: 64, Time: 1, Threads: 1})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := v.decoy.(Bcrypt); !ok || d.cost != MinBcryptCost+1 || d.Matches("pw") || d.Matches("") {
		t.Errorf("decoy %T %v, want a bcrypt hash at cost %d that matches nothing", v.decoy, v.decoy, MinBcryptCost+1)
	}
}

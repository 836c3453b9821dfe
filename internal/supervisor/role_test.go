// The environment one process of 'splicer run' hands the next, decoded as the next one reads it.

package supervisor

import (
	"reflect"
	"testing"
)

// env is an environment of its own for ReadState.
func env(kv ...string) Getenv {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// environ turns "K=V" lines into an environment.
func environ(lines []string) Getenv {
	var kv []string
	for _, l := range lines {
		for i := range l {
			if l[i] == '=' {
				kv = append(kv, l[:i], l[i+1:])
				break
			}
		}
	}
	return env(kv...)
}

func TestReadStateWorker(t *testing.T) {
	st, err := ReadState(environ(workerEnviron(worker{1, 4}, 77, "/run/x/master.sock")))
	if err != nil || st.Role != Worker || st.Worker != (worker{1, 4}) || st.MasterPid != 77 || st.MasterSockets != "/run/x/master.sock" {
		t.Errorf("worker 1/4 of master 77: %+v %v", st, err)
	}
	for _, bad := range []string{"4/4", "-1/2", "x", "1/"} {
		if _, err := ReadState(env(workerEnv, bad)); err == nil {
			t.Errorf("%s=%q accepted", workerEnv, bad)
		}
	}
}

func TestReadStateStarted(t *testing.T) {
	st, err := ReadState(env("PATH", "/bin"))
	if err != nil || st.Role != Started || st.In != nil || st.Master != nil || st.Drained != nil {
		t.Errorf("no splicer variable: %+v %v", st, err)
	}
}

func TestReadStateResumedMaster(t *testing.T) {
	want := &masterState{Config: []byte("listeners: []\n"), Dir: "/tmp/d", Files: []map[string]int{{"a": 5}, {"a": 6}},
		Admin: -1, Pids: []int{10, 11}, Retired: []int{9}, Spread: map[string]int{"a": 7}, Restarts: 3}
	st, err := ReadState(environ(masterStateEnviron(nil, want)))
	if err != nil || st.Role != ResumedMaster || !reflect.DeepEqual(st.Master, want) {
		t.Errorf("resumed master: %+v %v, want %+v", st.Master, err, want)
	}
	if _, err := ReadState(env(masterStateEnv, "{")); err == nil {
		t.Error("a state that does not parse was accepted")
	}
}

func TestReadStateDrained(t *testing.T) {
	want := []drainedServer{{"l", "p", "10.0.0.1:80"}}
	st, err := ReadState(environ(drainedEnviron(want)))
	if err != nil || !reflect.DeepEqual(st.Drained, want) || st.DrainedErr != nil {
		t.Errorf("drained: %+v %v %v", st.Drained, st.DrainedErr, err)
	}
	if drainedEnviron(nil) != nil {
		t.Error("no drained server: want no variable")
	}
	// A list that does not parse drains none, and the process still starts.
	st, err = ReadState(env(drainedEnv, "["))
	if err != nil || st.Drained != nil || st.DrainedErr == nil {
		t.Errorf("bad drained list: %+v %v", st, err)
	}
}

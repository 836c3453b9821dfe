// The protocol between the processes of 'splicer run': what a master tells its workers, what a master hands the binary that replaces it in place, what an upgrade hands its new process; each variable encoded and decoded here.

package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/splicer/splicer/internal/handoff"
)

// The environment variables one process of 'splicer run' sets for the
// next. With handoff.Env (SPLICER_HANDOFF: the inherited sockets and the
// pipe on which the new process says it serves) they are all there is.
const (
	// workerEnv tells a process the master started which worker it
	// is: "INDEX/COUNT", INDEX from 0. An upgrade's new process
	// inherits it.
	workerEnv = "SPLICER_WORKER"
	// masterPidEnv tells a worker its master's pid: a worker whose
	// master is gone (killed) drains and exits rather than serve on
	// unsupervised.
	masterPidEnv = "SPLICER_MASTER_PID"
	// masterSocketsEnv names, in a worker's environment, the master's
	// socket service (a unix socket in the master's directory).
	masterSocketsEnv = "SPLICER_MASTER_SOCKETS"
	// masterStateEnv carries the master's sockets and workers across
	// its execve into the new binary (masterState, resumeMaster).
	masterStateEnv = "SPLICER_MASTER_STATE"
	// drainedEnv carries the servers an operator drained to the new
	// process of an upgrade, as JSON.
	drainedEnv = "SPLICER_DRAINED"
)

// consumed are the variables meant for the one process they were set
// for, not for the processes it starts in turn: ReadState takes them
// out of this process's environment.
var consumed = []string{masterStateEnv, drainedEnv, handoff.Env}

// Role is what a process of 'splicer run' is, as its environment says.
type Role int

const (
	// Started: started by hand, by systemd, by an upgrade or by a
	// root process handing over (State.In set for the last two); its
	// configuration makes it a single daemon or a master.
	Started Role = iota
	// Worker: one of a master's workers (or its upgrade's new process).
	Worker
	// ResumedMaster: a master whose upgrade replaced its binary in
	// place (execve), its sockets and workers kept.
	ResumedMaster
)

// State is everything a process of 'splicer run' learns from its
// environment.
type State struct {
	Role Role
	// In are the sockets handed over by the process this one replaces,
	// or nil.
	In *handoff.Inherited
	// Worker is this worker's place, MasterPid the master that started
	// it (0 if unknown), MasterSockets the master's socket service;
	// when Role is Worker.
	Worker        worker
	MasterPid     int
	MasterSockets string
	// Master is the state of the master this process resumes, when
	// Role is ResumedMaster.
	Master *masterState
	// Drained are the servers the process this one replaces had
	// drained; DrainedErr says why they could not be read.
	Drained    []drainedServer
	DrainedErr error
}

// Getenv looks a variable up, as os.LookupEnv does.
type Getenv func(string) (string, bool)

// ReadState decodes this process's state from getenv, and takes the
// consumed variables out of the process's environment.
func ReadState(getenv Getenv) (State, error) {
	defer func() {
		for _, k := range consumed {
			os.Unsetenv(k)
		}
	}()
	var st State
	var err error
	if js, ok := getenv(handoff.Env); ok {
		if st.In, err = handoff.Parse(js); err != nil {
			return st, err
		}
	}
	if js, ok := getenv(drainedEnv); ok {
		if err := json.Unmarshal([]byte(js), &st.Drained); err != nil {
			st.Drained, st.DrainedErr = nil, err
		}
	}
	if js, ok := getenv(masterStateEnv); ok {
		st.Role, st.Master = ResumedMaster, &masterState{}
		if err := json.Unmarshal([]byte(js), st.Master); err != nil {
			return st, fmt.Errorf("%s: %w", masterStateEnv, err)
		}
		return st, nil
	}
	v, ok := getenv(workerEnv)
	if !ok {
		return st, nil
	}
	st.Role = Worker
	if st.Worker, err = parseWorker(v); err != nil {
		return st, err
	}
	pid, _ := getenv(masterPidEnv)
	if st.MasterPid, err = strconv.Atoi(pid); err != nil || st.MasterPid <= 0 {
		st.MasterPid = 0
	}
	st.MasterSockets, _ = getenv(masterSocketsEnv)
	return st, nil
}

// parseWorker reads a worker's place, "INDEX/COUNT".
func parseWorker(v string) (w worker, err error) {
	i, n, found := strings.Cut(v, "/")
	w.index, err = strconv.Atoi(i)
	if err == nil {
		w.count, err = strconv.Atoi(n)
	}
	if !found || err != nil || w.index < 0 || w.index >= w.count {
		return worker{}, fmt.Errorf("%s=%q: want INDEX/COUNT", workerEnv, v)
	}
	return w, nil
}

// workerEnviron is what a master of pid, whose socket service listens
// at sockets, adds to worker w's environment.
func workerEnviron(w worker, pid int, sockets string) []string {
	return []string{fmt.Sprintf("%s=%d/%d", workerEnv, w.index, w.count),
		masterPidEnv + "=" + strconv.Itoa(pid), masterSocketsEnv + "=" + sockets}
}

// drainedEnviron is what an upgrade adds to its new process's
// environment for the servers drained: nothing when none is.
func drainedEnviron(drained []drainedServer) []string {
	if len(drained) == 0 {
		return nil
	}
	b, _ := json.Marshal(drained) // plain strings: cannot fail
	return []string{drainedEnv + "=" + string(b)}
}

// masterStateEnviron is environ with the state a master hands the
// binary that replaces it in place.
func masterStateEnviron(environ []string, st *masterState) []string {
	js, _ := json.Marshal(st) // plain values: cannot fail
	return append(environ, masterStateEnv+"="+string(js))
}

// drainedServer is one server drained in one listener's pool.
type drainedServer struct {
	Listener string `json:"listener"`
	Pool     string `json:"pool"`
	Server   string `json:"server"`
}

// masterState is what a master hands the binary that replaces it.
type masterState struct {
	Config     []byte           `json:"config"`      // the running configuration's file, as it was read
	ConfigName string           `json:"config_name"` // and its name
	Dir        string           `json:"dir"`
	Files      []map[string]int `json:"files"` // per worker: socket name -> fd
	Admin      int              `json:"admin"` // the admin endpoint's fd, -1 without one
	Pids       []int            `json:"pids"`
	// Retired are workers an upgrade replaced that may still drain:
	// the next binary reaps them.
	Retired []int `json:"retired"`
	// Spread is each listener's program's mode map (reuseport.File),
	// by listener name: a reload may still flip it.
	Spread map[string]int `json:"spread"`
	// Restarts is splicer_worker_restarts_total, which goes on counting.
	Restarts int `json:"restarts"`
}

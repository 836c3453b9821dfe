// Forwarders in a lab's forwarder namespace, with their log captured and their metrics readable.

package fwdtest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// LabForwarder is an in-process forwarder whose listeners and upstream
// connections live in a lab's forwarder namespace.
type LabForwarder struct {
	*forwarder.Forwarder
	Lab     *lab.Lab
	Engines *all.Set
	Logs    *LogBuffer
}

// StartInLab runs listeners in l's forwarder namespace with the engines
// built there (those that attach to devices or probe the stack must see that
// namespace's). Cleanup shuts it down and prints its log if tb failed.
func StartInLab(tb testing.TB, l *lab.Lab, listeners ...config.Listener) *LabForwarder {
	tb.Helper()
	return StartInLabWith(tb, l, config.Default().Engines, listeners...)
}

// StartInLabWith is StartInLab with engines configured as given.
func StartInLabWith(tb testing.TB, l *lab.Lab, engines config.Engines, listeners ...config.Listener) *LabForwarder {
	tb.Helper()
	cfg := config.Default()
	cfg.Engines = engines
	cfg.Listeners = listeners
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("config: %v", err)
	}
	f := &LabForwarder{Lab: l, Logs: &LogBuffer{}}
	log := slog.New(slog.NewTextHandler(f.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	err := l.Fwd.Do(func() error {
		f.Engines = all.Build(cfg.Engines, log)
		var err error
		f.Forwarder, err = forwarder.New(&cfg, forwarder.Options{
			Log: log, Engines: f.Engines, Listen: l.Fwd.Listen, Dial: l.Fwd.Dialer(),
		})
		return err
	})
	if f.Engines != nil {
		tb.Cleanup(f.Engines.Close)
	}
	if err != nil {
		tb.Fatalf("forwarder: %v", err)
	}
	if err := f.Start(); err != nil {
		tb.Fatalf("start forwarder: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.Shutdown(ctx)
		if tb.Failed() {
			tb.Logf("forwarder log:\n%s", f.Logs)
		}
	})
	return f
}

// Metric is the value of the counter or gauge name whose labels are exactly
// the given name, value pairs, or 0 when there is no such series.
func (f *LabForwarder) Metric(name string, labels ...string) float64 {
	return Metric(f.Forwarder, name, labels...)
}

// Metric is f's counter or gauge name whose labels are exactly the given
// name, value pairs (a histogram's sample count), or 0 when there is no
// such series.
func Metric(f *forwarder.Forwarder, name string, labels ...string) float64 {
	v, _ := Series(f, name, labels...)
	return v
}

// Series is Metric and whether f has the series at all: a gauge at 0
// and a gauge not yet set differ.
func Series(f *forwarder.Forwarder, name string, labels ...string) (float64, bool) {
	families, err := f.Metrics().Registry.Gather()
	if err != nil {
		panic(err) // the forwarder's own registry: a programming error
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsAre(m.GetLabel(), labels) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount()), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// labelsAre reports whether pairs (name, value, name, value...) are exactly got.
func labelsAre(got []*dto.LabelPair, pairs []string) bool {
	if len(got) != len(pairs)/2 {
		return false
	}
	for _, lp := range got {
		found := false
		for i := 0; i+1 < len(pairs); i += 2 {
			found = found || (pairs[i] == lp.GetName() && pairs[i+1] == lp.GetValue())
		}
		if !found {
			return false
		}
	}
	return true
}

// LogBuffer collects a forwarder's log lines; safe for concurrent use.
type LogBuffer struct{ testenv.Buffer }

// Contains reports whether some log line contains s.
func (b *LogBuffer) Contains(s string) bool {
	return strings.Contains(b.String(), s)
}

// Line returns the first log line containing every one of parts, or "".
func (b *LogBuffer) Line(parts ...string) string {
	for _, ln := range strings.Split(b.String(), "\n") {
		match := true
		for _, p := range parts {
			match = match && strings.Contains(ln, p)
		}
		if match {
			return ln
		}
	}
	return ""
}

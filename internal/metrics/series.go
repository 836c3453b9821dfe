// Series: a metric vector's children kept by label value, so that a new connection pays a map read for each, not a label hash under the vector's lock.

package metrics

import (
	"sync"
	"sync/atomic"
)

// Series holds the children of a metric vector by one label's value,
// each made on first use (newChild, which fixes any other label) and
// kept: label values on the hot path (listener, engine, outcome, close
// reason) come from small fixed sets. Get never takes a lock once a
// value was seen: the map is replaced, never changed.
type Series[T any] struct {
	newChild func(value string) T
	mu       sync.Mutex
	m        atomic.Pointer[map[string]T]
}

// NewSeries returns a Series whose children newChild makes.
func NewSeries[T any](newChild func(value string) T) *Series[T] {
	return &Series[T]{newChild: newChild}
}

// Get returns the child for value, made if it was not yet.
func (s *Series[T]) Get(value string) T {
	if m := s.m.Load(); m != nil {
		if c, ok := (*m)[value]; ok {
			return c
		}
	}
	return s.add(value)
}

// add makes value's child and publishes a copy of the map that holds it.
func (s *Series[T]) add(value string) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	var old map[string]T
	if m := s.m.Load(); m != nil {
		old = *m
	}
	if c, ok := old[value]; ok {
		return c
	}
	next := make(map[string]T, len(old)+1)
	for k, c := range old {
		next[k] = c
	}
	c := s.newChild(value)
	next[value] = c
	s.m.Store(&next)
	return c
}

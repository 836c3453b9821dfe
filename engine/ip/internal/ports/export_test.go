// Access for the tests to what Pick examined.

package ports

// Probes is the number of ports (a map lookup each) and bitmap words Pick
// has examined so far: its work, counted rather than timed.
func (a *Allocator) Probes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.probes
}

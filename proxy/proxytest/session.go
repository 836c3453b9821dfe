// Package proxytest provides test doubles for proxies: a proxy.Session for unit tests of a proxy's control mode (a pair and a dial function, no forwarder and no engine), and a lenient, counting origin for refusal tests.
package proxytest

import (
	"context"
	"log/slog"
	"net"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy"
)

// Session is the part of proxy.Session a proxy's control mode uses, as the
// forwarder's session does it: Dial makes the connection it returns the
// pair's upstream. It has no engine: Splice and Forward panic.
type Session struct {
	P *engine.Pair
	// DialFunc connects for Dial.
	DialFunc func(ctx context.Context, addr string) (*net.TCPConn, error)
	// Ends are the functions AtEnd was given, for the test to call.
	Ends []func()
}

var _ proxy.Session = (*Session)(nil)

func (s *Session) Pair() *engine.Pair        { return s.P }
func (s *Session) Stopping() <-chan struct{} { return nil }
func (s *Session) Log() *slog.Logger         { return slog.New(slog.DiscardHandler) }
func (s *Session) NoSplice(string)           {}
func (s *Session) AtEnd(f func())            { s.Ends = append(s.Ends, f) }

// Dial connects with DialFunc and makes the connection the pair's upstream.
func (s *Session) Dial(ctx context.Context, addr string) (*net.TCPConn, error) {
	c, err := s.DialFunc(ctx, addr)
	if err != nil {
		return nil, err
	}
	s.P.SetUpstream(c)
	return c, nil
}

func (s *Session) Splice(context.Context, engine.Options) (engine.Result, error) {
	panic("proxytest.Session has no engine")
}

func (s *Session) Forward(context.Context, engine.Options) (engine.Result, error) {
	panic("proxytest.Session has no engine")
}

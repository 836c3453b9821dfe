// The helper processes of the idle experiment: a process may hold at most as many sockets as its open-file limit (20,000 here), so the experiment's client and origin ends run in several.

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/loadgen"
)

// IdleHelperCommand is the splicer-bench command that runs IdleHelper.
const IdleHelperCommand = "idle-helper"

// IdleHelper is one process of the idle experiment, by args:
//
//	serve ADDR                 echo every connection to ADDR (loadgen.EchoSmall) until killed
//	dial ADDR SRC[,SRC...]     hold idle connections to ADDR from the SRC addresses in turn
//
// A dialler takes commands on in, one a line, and answers each on out:
// "open N" opens N more ("opened TOTAL", or "error ..."); "echo" has every
// connection echo a message ("echoed OK FAILED [first error]"). At the end
// of in it resets its connections and returns.
func IdleHelper(args []string, in io.Reader, out io.Writer) error {
	if len(args) < 2 {
		return errors.New("idle-helper: serve ADDR | dial ADDR SRC[,SRC...]")
	}
	switch args[0] {
	case "serve":
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			return err
		}
		return loadgen.EchoSmall(ln)
	case "dial":
		var srcs []netip.Addr
		if len(args) > 2 {
			for _, s := range strings.Split(args[2], ",") {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return err
				}
				srcs = append(srcs, a)
			}
		}
		return idleDialler(loadgen.NewIdle(args[1], srcs), in, out)
	}
	return fmt.Errorf("idle-helper: unknown role %q", args[0])
}

// idleConc is how many connections a dialler opens, or checks, at once.
const idleConc = 64

func idleDialler(idle *loadgen.Idle, in io.Reader, out io.Writer) error {
	defer idle.Close()
	ctx := context.Background()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "open":
			n, err := strconv.Atoi(arg)
			if err == nil {
				err = idle.Open(ctx, n, idleConc)
			}
			if err != nil {
				fmt.Fprintf(out, "error %s\n", oneLine(err))
				continue
			}
			fmt.Fprintf(out, "opened %d\n", idle.Len())
		case "echo":
			ok, err := idle.Echo(ctx, idleConc*4, 30*time.Second)
			line := fmt.Sprintf("echoed %d %d", ok, idle.Len()-ok)
			if err != nil {
				line += " " + oneLine(err)
			}
			fmt.Fprintln(out, line)
		default:
			fmt.Fprintf(out, "error unknown command %q\n", sc.Text())
		}
	}
	return sc.Err()
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

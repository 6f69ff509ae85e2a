// Package redistest runs a real redis-server for tests, and a TCP proxy in
// front of it that can cut or blackhole the connections through it.
//
// The server is Debian's redis-server taken from PATH; when it is missing,
// Start and New fail with the command that installs it, so a test run never
// passes without having talked to Redis.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InstallCommand installs the redis-server the tests need.
const InstallCommand = "apt-get install -y redis-server"

// ErrNoServer is returned (wrapped) when redis-server is not on PATH.
var ErrNoServer = errors.New("redistest: redis-server not found on PATH; install it with `" + InstallCommand + "`")

// Server is one redis-server process on a loopback port, with its working
// directory in a temporary directory. It keeps nothing on disk (no RDB
// snapshots, no AOF), so a Restart starts empty.
type Server struct {
	bin  string
	dir  string
	port int
	args []string // extra configuration, given at every start

	mu     sync.Mutex
	proc   *os.Process // nil while stopped
	exited chan error  // receives the process's exit
}

// Start starts a server for tb and stops it (removing its directory) when
// the test ends. A missing redis-server fails the test, never skips it.
// args are more configuration ("--requirepass", "secret").
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := New(args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// New starts a server, for TestMain, which has no testing.TB: the caller
// must Close it. The error names the install command when redis-server is
// missing. args are more configuration, as for Start.
func New(args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoServer
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, args: args}
	// A port found free may be taken before the server binds it: try a few.
	for range 5 {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// Addr is the server's "127.0.0.1:port" address; it stays the same across
// Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir is the server's working directory (its log file is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Restart stops the server if it runs (as Stop does) and starts it again on
// the same port, empty.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start()
}

// Stop ends the server with SIGTERM and waits for it to exit. Stopping a
// stopped server does nothing.
func (s *Server) Stop() error { return s.signal(syscall.SIGTERM) }

// Kill ends the server with SIGKILL (no shutdown, connections reset) and
// waits for it to exit.
func (s *Server) Kill() error { return s.signal(syscall.SIGKILL) }

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	err := s.Stop()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	_ = s.proc.Signal(sig)
	<-s.exited // it exits by the signal: not an error here
	s.proc = nil
	return nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("redistest: server already running")
	}
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	)
	cmd.Args = append(cmd.Args, s.args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: starting %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ready(s.Addr()) {
			s.proc, s.exited = cmd.Process, exited
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redistest: redis-server exited at start (%v): %s", err, s.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redistest: redis-server did not answer PING within 10s: %s", s.logTail())
		}
	}
}

// logTail returns the last lines of the server's log, for errors.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// ready reports whether the server at addr answers: PONG, or an error that
// asks for authentication.
func ready(addr string) bool {
	err := ping(addr)
	return err == nil || strings.Contains(err.Error(), "NOAUTH")
}

// ping sends one PING to addr and checks the reply.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("redistest: PING answered %q", line)
	}
	return nil
}

// freePort returns a loopback TCP port that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

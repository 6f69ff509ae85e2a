package redistest

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// roundTrip sends PING on c and returns the reply line, or an error when
// none comes within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestServerAndProxy(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if line, err := roundTrip(c, r, time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING through the proxy: %q, %v", line, err)
	}

	// Blackholed: no reply, but the socket stays open; the reply arrives on
	// resume.
	p.Blackhole(true)
	if line, err := roundTrip(c, r, 100*time.Millisecond); err == nil {
		t.Fatalf("PING through a blackholed proxy answered %q", line)
	}
	p.Blackhole(false)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("held PING after resume: %q, %v", line, err)
	}

	// Cut: the connection ends; a new one works.
	p.Cut()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read on a cut connection succeeded")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if line, err := roundTrip(c2, bufio.NewReader(c2), time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING on a new connection after Cut: %q, %v", line, err)
	}

	// Kill and Restart: same address, answering again.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err == nil {
		t.Fatal("killed server answers PING")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestMissingServerFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := New()
	if err == nil || !strings.Contains(err.Error(), InstallCommand) {
		t.Fatalf("New without redis-server on PATH: %v, want the install command", err)
	}
}

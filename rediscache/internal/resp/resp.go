// Package resp is a minimal RESP3 connection to Redis for the cache's
// tracker: it sends commands and reads replies and push messages in the
// exact order the server wrote them, which the tracker's watermark relies
// on (a general client may reorder pushes against replies, or hide them).
package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Kind is the RESP3 type of a Value, its first byte on the wire.
type Kind byte

// The kinds a Value has.
const (
	SimpleString Kind = '+'
	SimpleError  Kind = '-'
	Integer      Kind = ':'
	BulkString   Kind = '$'
	Array        Kind = '*'
	Null         Kind = '_'
	Boolean      Kind = '#'
	Double       Kind = ','
	BigNumber    Kind = '('
	BulkError    Kind = '!'
	Verbatim     Kind = '='
	Map          Kind = '%'
	Set          Kind = '~'
	Attribute    Kind = '|'
	Push         Kind = '>'
)

// Value is one message read from the server.
type Value struct {
	Kind  Kind
	Str   string  // strings, errors, doubles, big numbers, booleans ("t"/"f")
	Int   int64   // integers
	Elems []Value // arrays, sets, pushes; maps as key, value, key, value...
	// IsNull is true for Null and for RESP2-style null bulk strings and
	// arrays ($-1, *-1).
	IsNull bool
}

// Err returns the server's error for an error reply, else nil.
func (v Value) Err() error {
	if v.Kind == SimpleError || v.Kind == BulkError {
		return &ServerError{Msg: v.Str}
	}
	return nil
}

// ServerError is an error reply.
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return "redis: " + e.Msg }

// Options are how Dial connects and authenticates.
type Options struct {
	Username, Password string
	SelectDB           int
	// Dial opens the connection; nil: a net.Dialer over TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Conn is one RESP3 connection. Send and Read may run in different
// goroutines (one each); neither is safe for concurrent use by itself.
type Conn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// Dial connects to addr and switches the connection to RESP3 with HELLO 3,
// authenticating and selecting the database as o says. ctx bounds the
// handshake.
func Dial(ctx context.Context, addr string, o Options) (*Conn, error) {
	dial := o.Dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	nc, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{c: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 4<<10)}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	// Cancelling ctx ends a handshake the server does not answer.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	hello := []string{"HELLO", "3"}
	if o.Password != "" {
		user := o.Username
		if user == "" {
			user = "default"
		}
		hello = append(hello, "AUTH", user, o.Password)
	}
	if _, err := c.Do(hello...); err != nil {
		nc.Close()
		return nil, fmt.Errorf("resp: HELLO 3: %w", err)
	}
	if o.SelectDB != 0 {
		if _, err := c.Do("SELECT", strconv.Itoa(o.SelectDB)); err != nil {
			nc.Close()
			return nil, fmt.Errorf("resp: SELECT: %w", err)
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// Do sends one command and reads its reply, for the handshake (no push
// may be pending: pushes read here are skipped). An error reply is
// returned as a *ServerError.
func (c *Conn) Do(args ...string) (Value, error) {
	if err := c.Send(args...); err != nil {
		return Value{}, err
	}
	for {
		v, err := c.Read()
		if err != nil {
			return v, err
		}
		if v.Kind == Push {
			continue
		}
		return v, v.Err()
	}
}

// Send writes one command and flushes it.
func (c *Conn) Send(args ...string) error {
	c.w.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		c.w.WriteString("$" + strconv.Itoa(len(a)) + "\r\n")
		c.w.WriteString(a)
		c.w.WriteString("\r\n")
	}
	return c.w.Flush()
}

// SetReadDeadline bounds the next Reads.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

// Close closes the connection; a Read in progress returns an error.
func (c *Conn) Close() error { return c.c.Close() }

// Read reads the next message: a reply or a push. Attributes are skipped.
func (c *Conn) Read() (Value, error) {
	for {
		v, err := c.read(0)
		if err != nil || v.Kind != Attribute {
			return v, err
		}
	}
}

const maxDepth = 16

var errProtocol = errors.New("resp: protocol error")

func (c *Conn) line() (string, error) {
	s, err := c.r.ReadString('\n')
	if err != nil {
		if err == io.EOF && s != "" {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	if len(s) < 3 || s[len(s)-2] != '\r' {
		return "", errProtocol
	}
	return s[:len(s)-2], nil
}

func (c *Conn) read(depth int) (Value, error) {
	if depth > maxDepth {
		return Value{}, errProtocol
	}
	l, err := c.line()
	if err != nil {
		return Value{}, err
	}
	v := Value{Kind: Kind(l[0])}
	body := l[1:]
	switch v.Kind {
	case SimpleString, SimpleError, Double, BigNumber, Boolean:
		v.Str = body
	case Null:
		v.IsNull = true
	case Integer:
		v.Int, err = strconv.ParseInt(body, 10, 64)
	case BulkString, BulkError, Verbatim:
		var n int
		if n, err = strconv.Atoi(body); err != nil {
			break
		}
		if n < 0 {
			v.IsNull = true
			break
		}
		buf := make([]byte, n+2)
		if _, err = io.ReadFull(c.r, buf); err != nil {
			break
		}
		v.Str = string(buf[:n])
	case Array, Set, Push, Map, Attribute:
		var n int
		if n, err = strconv.Atoi(body); err != nil {
			break
		}
		if n < 0 {
			v.IsNull = true
			break
		}
		if v.Kind == Map || v.Kind == Attribute {
			n *= 2
		}
		v.Elems = make([]Value, 0, min(n, 1024))
		for range n {
			e, err := c.read(depth + 1)
			if err != nil {
				return Value{}, err
			}
			v.Elems = append(v.Elems, e)
		}
	default:
		return Value{}, fmt.Errorf("%w: type byte %q", errProtocol, l[0])
	}
	if err != nil {
		return Value{}, fmt.Errorf("%w: %v", errProtocol, err)
	}
	return v, nil
}

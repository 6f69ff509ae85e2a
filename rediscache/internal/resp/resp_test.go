package resp

import (
	"bufio"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	in := "+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n_\r\n" +
		">2\r\n$10\r\ninvalidate\r\n*2\r\n$2\r\nk1\r\n$2\r\nk2\r\n" +
		">2\r\n$10\r\ninvalidate\r\n_\r\n" +
		"|1\r\n+a\r\n+b\r\n%1\r\n+server\r\n+redis\r\n"
	c := &Conn{r: bufio.NewReader(strings.NewReader(in))}
	want := []string{"+OK", "-ERR no", ":42", "$abc", "$null", "_null", ">invalidate[k1 k2]", ">invalidate null", "%server=redis"}
	for i, w := range want {
		v, err := c.Read()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		var got string
		switch {
		case v.Kind == Integer:
			got = ":42"
		case v.Kind == Push && v.Elems[1].IsNull:
			got = ">" + v.Elems[0].Str + " null"
		case v.Kind == Push:
			got = ">" + v.Elems[0].Str + "[" + v.Elems[1].Elems[0].Str + " " + v.Elems[1].Elems[1].Str + "]"
		case v.Kind == Map:
			got = "%" + v.Elems[0].Str + "=" + v.Elems[1].Str
		case v.IsNull:
			got = string(v.Kind) + "null"
		default:
			got = string(v.Kind) + v.Str
		}
		if got != w {
			t.Errorf("message %d: %s, want %s", i, got, w)
		}
	}
	if _, err := c.Read(); err == nil {
		t.Fatal("read past the end succeeded")
	}
}

func TestReadMalformed(t *testing.T) {
	for _, in := range []string{"?x\r\n", "$5\r\nab\r\n", ":x\r\n", "*1\r\n", "+OK\n"} {
		c := &Conn{r: bufio.NewReader(strings.NewReader(in))}
		if v, err := c.Read(); err == nil {
			t.Errorf("%q read as %+v", in, v)
		}
	}
}

package offheap

import "testing"

func TestInSpare(t *testing.T) {
	buf := make([]byte, 8, 64)
	other := make([]byte, 8)
	for _, c := range []struct {
		name     string
		dst, key []byte
		want     bool
	}{
		{"key in the spare capacity", buf, buf[8:16], true},
		{"key at the spare capacity's end", buf, buf[63:64], true},
		{"key in dst's length", buf, buf[:8], false},
		{"key ending where the spare capacity starts", buf, buf[2:8], false},
		{"key straddling length and spare", buf, buf[4:12], true},
		{"no spare capacity", buf[:8:8], buf[8:16], false},
		{"no spare capacity, key straddling dst's end", buf[:8:8], buf[4:12], false},
		{"key after dst's capacity", buf[:8:16], buf[16:24], false},
		{"other array", buf, other, false},
		{"empty key", buf, buf[10:10], false},
		{"nil dst", nil, buf[8:16], false},
		{"nil key", buf, nil, false},
	} {
		if got := InSpare(c.dst, c.key); got != c.want {
			t.Errorf("%s: InSpare = %v, want %v", c.name, got, c.want)
		}
	}
}

package offheap

import "testing"

func TestOverlap(t *testing.T) {
	buf := make([]byte, 64)
	other := make([]byte, 8)
	for _, c := range []struct {
		name string
		a, b []byte
		want bool
	}{
		{"same", buf[:8], buf[:8], true},
		{"inside", buf[:64], buf[10:12], true},
		{"last byte of a is first of b", buf[:9], buf[8:16], true},
		{"adjacent", buf[:8], buf[8:16], false},
		{"adjacent the other way", buf[8:16], buf[:8], false},
		{"apart", buf[:8], buf[20:30], false},
		{"other array", buf, other, false},
		{"empty a", buf[8:8], buf, false},
		{"empty b", buf, buf[3:3], false},
		{"nil", nil, buf, false},
	} {
		if got := Overlap(c.a, c.b); got != c.want {
			t.Errorf("%s: Overlap = %v, want %v", c.name, got, c.want)
		}
		if got := Overlap(c.b, c.a); got != c.want {
			t.Errorf("%s, swapped: Overlap = %v, want %v", c.name, got, c.want)
		}
	}
}

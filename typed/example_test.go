//go:build linux

package typed_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/typed"
)

type user struct {
	Name   string `json:"name"`
	Visits int    `json:"visits"`
}

func Example() {
	dir, err := os.MkdirTemp("", "typed-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	raw, err := hashmap.Open(filepath.Join(dir, "users.map"), &hashmap.Options{Entries: 1000})
	if err != nil {
		panic(err)
	}
	defer raw.Close()

	users := typed.New(raw, typed.Int64(), typed.JSON[user]())
	if err := users.Put(42, user{Name: "ada"}); err != nil {
		panic(err)
	}
	// Compute is atomic across processes: no visit is lost.
	err = users.Compute(42, func(u user, found bool) (user, bool) {
		u.Visits++
		return u, true
	})
	if err != nil {
		panic(err)
	}
	u, err := users.Get(42)
	fmt.Println(u.Name, u.Visits, err)

	_, err = users.Get(7)
	fmt.Println(errors.Is(err, hashmap.ErrNotFound))
	// Output:
	// ada 1 <nil>
	// true
}

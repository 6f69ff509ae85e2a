//go:build linux

package rediscache_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache"
	"github.com/sharedmap/sharedmap/typed"
)

// Every process of the host opens the same file; one of them becomes the
// tracker.
func ExampleOpen() {
	ctx := context.Background()
	c, err := rediscache.Open(ctx, rediscache.Options{
		Path:         "/dev/shm/users.cache",
		Map:          &hashmap.Options{Entries: 100_000, AverageKeySize: 16, AverageValueSize: 64},
		ClientOption: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
		Prefixes:     []string{"user:"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.Set(ctx, "user:42", []byte("ada"), time.Hour); err != nil {
		log.Fatal(err)
	}
	v, err := c.Get(ctx, "user:42") // every process of the host reads "ada" now
	switch {
	case errors.Is(err, rediscache.ErrNotFound):
		fmt.Println("no such user")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("%s\n", v)
	}
	fmt.Printf("%+v\n", c.Stats())
}

func ExampleNewTyped() {
	ctx := context.Background()
	c, err := rediscache.Open(ctx, rediscache.Options{
		Path:         "/dev/shm/scores.cache",
		ClientOption: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
		Prefixes:     []string{"score:"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	scores := rediscache.NewTyped(c, typed.String(), typed.Int64())
	if err := scores.Set(ctx, "score:ada", 42, 0); err != nil {
		log.Fatal(err)
	}
	n, err := scores.Get(ctx, "score:ada")
	fmt.Println(n, err)
}

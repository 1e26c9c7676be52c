package shard_test

import (
	"errors"
	"testing"

	"github.com/openetl/etl/shard"
)

func isConfig(err error) bool { return errors.Is(err, shard.ErrConfig) }

func TestOrdinal(t *testing.T) {
	for _, c := range []struct {
		host string
		want int
		ok   bool
	}{
		{"orders-0", 0, true}, {"orders-3", 3, true}, {"etl-orders-12.etl.prod.svc.cluster.local", 12, true},
		{"orders", 0, false}, {"orders-", 0, false}, {"orders-x", 0, false}, {"orders-+1", 0, false}, {"", 0, false},
	} {
		got, err := shard.Ordinal(c.host)
		var ie *shard.IndexError
		switch {
		case c.ok && (err != nil || got != c.want):
			t.Errorf("Ordinal(%q) = %d, %v; want %d", c.host, got, err, c.want)
		case !c.ok && (!errors.Is(err, shard.ErrIndex) || !errors.As(err, &ie) || ie.Value != c.host):
			t.Errorf("Ordinal(%q) = %d, %v; want an *IndexError", c.host, got, err)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("SHARD", "2")
	if i, err := shard.FromEnv("SHARD", 4); err != nil || i != 2 {
		t.Errorf("FromEnv = %d, %v; want 2", i, err)
	}
	for _, v := range []string{"4", "-1", "x", ""} {
		t.Setenv("SHARD", v)
		if i, err := shard.FromEnv("SHARD", 4); !errors.Is(err, shard.ErrIndex) {
			t.Errorf("SHARD=%q: FromEnv = %d, %v; want ErrIndex", v, i, err)
		}
	}
	if _, err := shard.FromEnv("OPENETL_SURELY_UNSET_SHARD", 4); !errors.Is(err, shard.ErrIndex) {
		t.Errorf("unset: %v, want ErrIndex", err)
	}
	t.Setenv("SHARD", "0")
	if _, err := shard.FromEnv("SHARD", 0); !errors.Is(err, shard.ErrIndex) {
		t.Errorf("count 0: %v, want ErrIndex", err)
	}
}

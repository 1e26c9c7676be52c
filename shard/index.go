package shard

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Errors returned by this package, wrapped with the details.
var (
	// ErrIndex is matched by the *IndexError of FromEnv, FromHostname
	// and Ordinal: the value doesn't name a shard.
	ErrIndex = errors.New("shard: bad shard index")
	// ErrConfig is returned by NewLeases for an invalid LeaseConfig; the
	// message names the field.
	ErrConfig = errors.New("shard: invalid lease config")
)

// IndexError says why a value doesn't name a shard of Count. It matches
// ErrIndex.
type IndexError struct {
	From   string // where the value came from: "$SHARD", "hostname"
	Value  string // the value as found
	Count  int    // the shard count it was checked against (0: not checked)
	Reason string
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("shard: %s = %q: %s", e.From, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrIndex) true.
func (e *IndexError) Is(target error) bool { return target == ErrIndex }

// FromEnv returns the shard index in the environment variable key: a
// decimal integer in [0, count). Unset, empty, not a number or out of
// range is an *IndexError.
func FromEnv(key string, count int) (int, error) {
	v, ok := os.LookupEnv(key)
	from := "$" + key
	if !ok {
		return 0, &IndexError{From: from, Count: count, Reason: "not set"}
	}
	return parse(from, v, strings.TrimSpace(v), count)
}

// FromHostname returns the shard index of a Kubernetes StatefulSet pod:
// the ordinal its hostname ends in (Ordinal of os.Hostname), checked to
// be below count.
func FromHostname(count int) (int, error) {
	h, err := os.Hostname()
	if err != nil {
		return 0, &IndexError{From: "hostname", Count: count, Reason: err.Error()}
	}
	n, err := Ordinal(h)
	if err != nil {
		return 0, err
	}
	if n >= count {
		return 0, &IndexError{From: "hostname", Value: h, Count: count,
			Reason: fmt.Sprintf("ordinal %d is not below the shard count %d (replicas above the count?)", n, count)}
	}
	return n, nil
}

// Ordinal returns the ordinal a StatefulSet pod's hostname ends in:
// "orders-3" → 3 (a fully qualified name's first label counts). A name
// without "-<digits>" at its end is an *IndexError.
func Ordinal(hostname string) (int, error) {
	host, _, _ := strings.Cut(hostname, ".")
	i := strings.LastIndexByte(host, '-')
	if i < 0 || i == len(host)-1 {
		return 0, &IndexError{From: "hostname", Value: hostname, Reason: `doesn't end in "-<ordinal>" as a StatefulSet pod's does`}
	}
	return parse("hostname", hostname, host[i+1:], 0)
}

// parse reads a decimal index below count (count 0: no bound).
func parse(from, raw, digits string, count int) (int, error) {
	n, err := strconv.Atoi(digits)
	switch {
	case err != nil || digits == "" || digits[0] == '+' || digits[0] == '-':
		return 0, &IndexError{From: from, Value: raw, Count: count, Reason: "not a non-negative decimal integer"}
	case count > 0 && n >= count:
		return 0, &IndexError{From: from, Value: raw, Count: count, Reason: fmt.Sprintf("must be below the shard count %d", count)}
	case count <= 0 && from != "hostname":
		return 0, &IndexError{From: from, Value: raw, Count: count, Reason: fmt.Sprintf("the shard count %d is not positive", count)}
	}
	return n, nil
}

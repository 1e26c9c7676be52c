package etl_test

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// THIRD_PARTY_NOTICES is written by scripts/notices.sh from
// engine/rust/Cargo.lock; this test fails while it lists other crates or
// versions than the lock file, so a dependency change can't land without
// its notices. It reads the two files only (no cargo, no network).
func TestThirdPartyNoticesMatchCargoLock(t *testing.T) {
	lock := cargoLockCrates(t, "engine/rust/Cargo.lock")
	notices := noticeCrates(t, "THIRD_PARTY_NOTICES")
	if len(lock) == 0 || len(notices) == 0 {
		t.Fatalf("read %d crates from Cargo.lock and %d from THIRD_PARTY_NOTICES", len(lock), len(notices))
	}
	var stale []string
	for c := range lock {
		if !notices[c] {
			stale = append(stale, "missing from the notices: "+c)
		}
	}
	for c := range notices {
		if !lock[c] {
			stale = append(stale, "not in Cargo.lock: "+c)
		}
	}
	if len(stale) > 0 {
		slices.Sort(stale)
		t.Errorf("THIRD_PARTY_NOTICES is stale; run scripts/notices.sh and commit the result:\n%s", strings.Join(stale, "\n"))
	}
	t.Run("LicenseIsApache2", func(t *testing.T) {
		b, err := os.ReadFile("LICENSE")
		if err != nil {
			t.Fatal(err)
		}
		head := strings.Join(strings.Fields(string(b[:min(len(b), 200)])), " ")
		if !strings.HasPrefix(head, "Apache License Version 2.0, January 2004") || len(b) < 10000 {
			t.Errorf("LICENSE is not the Apache License 2.0 text (starts %q, %d bytes)", head, len(b))
		}
		if !strings.Contains(string(b), "END OF TERMS AND CONDITIONS") {
			t.Error("LICENSE lacks the end of the Apache License's terms")
		}
	})
}

// cargoLockCrates returns "name version" of every registry package in a
// Cargo.lock (the engine crate itself has no source line and is left out).
func cargoLockCrates(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	var name, version string
	var registry, inPackage bool
	flush := func() {
		if name != "" && registry {
			out[name+" "+version] = true
		}
		name, version, registry = "", "", false
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, ok := strings.Cut(line, " = ")
		switch {
		case line == "[[package]]":
			flush()
			inPackage = true
		case strings.HasPrefix(line, "["):
			inPackage = false // [metadata] or another table
		case !inPackage:
		case ok && key == "name":
			name = unquote(t, val)
		case ok && key == "version":
			version = unquote(t, val)
		case ok && key == "source":
			registry = strings.HasPrefix(unquote(t, val), "registry+")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	return out
}

// noticeRow is a line of the notices' crate table: role, name, version,
// license expression.
var noticeRow = regexp.MustCompile(`^(linked|build|test|other) +(\S+) +(\S+) +\S`)

func noticeCrates(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := noticeRow.FindStringSubmatch(line); m != nil {
			if out[m[2]+" "+m[3]] {
				t.Errorf("%s lists %s %s twice", path, m[2], m[3])
			}
			out[m[2]+" "+m[3]] = true
		}
	}
	return out
}

func unquote(t *testing.T, s string) string {
	t.Helper()
	v, err := strconv.Unquote(s)
	if err != nil {
		t.Fatalf("Cargo.lock value %s: %v", s, err)
	}
	return v
}

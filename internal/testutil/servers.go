package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// privateEnv names the directory of the servers PrivateServer started
// for the running test.
const privateEnv = "OPENETL_PRIVATE_SERVERS_DIR"

// PrivateServer starts a server of t's own (`scripts/servers.sh start
// NAME` in a new directory, from what the shared start installed), points
// the environment the tests read (OPENETL_SERVERS_DIR and the service's
// OPENETL_TEST_* variables) at it for the rest of t (t.Setenv), and
// stops it when t ends. A test that takes a server down (ServerDown)
// calls it first: go test runs packages at the same time, and an outage
// of a shared server fails the tests of every other package that uses
// it.
func PrivateServer(t testing.TB, name string) {
	t.Helper()
	if os.Getenv("OPENETL_SERVERS_DIR") == "" {
		t.Fatalf("OPENETL_SERVERS_DIR is not set: start the servers with scripts/servers.sh start %s", name)
	}
	script := filepath.Join(Root(t), "scripts", "servers.sh")
	c := exec.Command(script, "start", name)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENETL_SERVERS_DIR=") {
			c.Env = append(c.Env, kv)
		}
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	env := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if ok && strings.HasPrefix(line, "export ") {
			env[k] = strings.Trim(v, "'")
		}
	}
	dir := env["OPENETL_SERVERS_DIR"]
	if dir != "" {
		t.Cleanup(func() {
			if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
				t.Errorf("servers.sh stop %s: %v\n%s", dir, err, out)
			}
		})
	}
	if err != nil || dir == "" {
		t.Fatalf("servers.sh start %s (a server of the test's own): %v\n%s%s", name, err, out, stderr.String())
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Setenv(privateEnv, dir)
	t.Logf("a %s server of the test's own, in %s", name, dir)
}

// ServerDown stops one server that scripts/servers.sh started (s3,
// kafka, postgres, mariadb), keeping its port and data, as an outage or the first
// half of a restart: `servers.sh down NAME` on $OPENETL_SERVERS_DIR,
// which must be a PrivateServer's (the test fails otherwise).
// Postgres stops with pg_ctl stop -m fast. The test fails when the
// servers were not started by the script. A cleanup brings the server
// back if the test doesn't, so later tests find it.
func ServerDown(t testing.TB, name string) {
	t.Helper()
	if dir := os.Getenv("OPENETL_SERVERS_DIR"); dir == "" || os.Getenv(privateEnv) != dir {
		t.Fatalf("ServerDown(%q) on shared servers: call PrivateServer(t, %q) first (other packages' tests use the shared ones)", name, name)
	}
	servers(t, "down", name)
	t.Cleanup(func() {
		dir := os.Getenv("OPENETL_SERVERS_DIR")
		if _, err := os.Stat(filepath.Join(dir, name+".pid")); err != nil {
			servers(t, "up", name)
		}
	})
}

// ServerUp starts a server ServerDown stopped, on the same port from the
// same data, and returns once it is ready (`servers.sh up NAME`).
func ServerUp(t testing.TB, name string) {
	t.Helper()
	servers(t, "up", name)
}

func servers(t testing.TB, cmd, name string) {
	t.Helper()
	if os.Getenv("OPENETL_SERVERS_DIR") == "" {
		t.Fatalf("OPENETL_SERVERS_DIR is not set: start the servers with scripts/servers.sh start %s", name)
	}
	c := exec.Command(filepath.Join(Root(t), "scripts", "servers.sh"), cmd, name)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("servers.sh %s %s: %v\n%s", cmd, name, err, out)
	}
	t.Logf("servers.sh %s %s: %s", cmd, name, out)
}

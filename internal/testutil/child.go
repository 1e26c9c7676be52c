package testutil

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// SuiteVerdict re-runs the test binary's test (a conformance suite run
// against a deliberately broken connector, chosen by env) in a child
// process, and checks its verdict: with want empty the child must pass;
// otherwise it must fail, in every check of want (any one of them when
// anyOf), as the "--- FAIL: test/check" lines of -test.v show. Used to
// prove a suite can fail.
func SuiteVerdict(t *testing.T, test, env string, want []string, anyOf bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the child: %v", err)
	}
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("the suite fails a correct connector (%s):\n%s", env, out)
		}
		return
	}
	if err == nil {
		t.Fatalf("the suite passes a broken connector (%s):\n%s", env, out)
	}
	failed := 0
	for _, check := range want {
		if strings.Contains(string(out), "--- FAIL: "+test+"/"+check+" ") {
			failed++
		} else if !anyOf {
			t.Errorf("%s: check %s did not fail:\n%s", env, check, out)
		}
	}
	if anyOf && failed == 0 {
		t.Errorf("%s: none of the checks %v failed:\n%s", env, want, out)
	}
}

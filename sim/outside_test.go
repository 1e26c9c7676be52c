package sim_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink/sinktest"
)

const envOutsideChild = "SIM_OUTSIDE_CHILD"

// TestRunSeedsOutsideACheckout: a user's simulation (sim.RunSeeds) in a module
// that is not a git checkout runs its seeds and says nothing about git:
// the child runs in an empty temporary directory, where git rev-parse
// fails, and its -test.v output must not mention git.
func TestRunSeedsOutsideACheckout(t *testing.T) {
	if os.Getenv(envOutsideChild) != "" {
		sim.RunSeeds(t, sim.Seeds{Name: "the fake", Key: "outside", Default: 2,
			Run: func(_ *testing.T, seed uint64) (*sim.Report, error) {
				opts := ciOptions
				opts.Target = fakeTarget(seed, sinktest.FakeCorrect)
				return sim.Run(seed, opts)
			},
			Replay: replayCommand})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunSeedsOutsideACheckout$", "-test.v", "-test.count=1")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), envOutsideChild+"=1", "GIT_CEILING_DIRECTORIES="+cmd.Dir, "OPENETL_SIM_SEEDS=", "OPENETL_SIM_SEED=", "OPENETL_SIM_BASE=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child failed: %v\n%s", err, out)
	}
	if strings.Contains(strings.ToLower(string(out)), "git") {
		t.Errorf("outside a git checkout the simulation's output mentions git:\n%s", out)
	}
	if !strings.Contains(string(out), "--- PASS: TestRunSeedsOutsideACheckout") {
		t.Errorf("the child ran no seeds:\n%s", out)
	}
}

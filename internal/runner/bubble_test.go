package runner_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
)

// inBubble are the package's tests that TestInBubble runs again inside a
// testing/synctest bubble. There the runner's timers (epoch interval,
// idle barrier placement, progress polls, stop timeout, commit backoff)
// and the fakes' pacing run on the bubble's fake clock, which moves only
// when every goroutine of the bubble is blocked: a test then takes the
// same path through its timers on any machine, however loaded (a Run
// stopped after 3 epochs of 20 ms, its source paced at 20 us a record,
// commits the same rows every time, where on the real clock how many
// depends on the machine), and a goroutine an attempt leaks fails the
// test as a deadlock when the bubble ends. Goroutines still run in parallel, so
// their scheduling is not replayed. The tests also run on the real clock
// as themselves, which meets the timers at the moments a real machine
// does.
var inBubble = map[string]func(*testing.T){
	"TestByteBudgetClosesEpochs":                    TestByteBudgetClosesEpochs,
	"TestCancelledSyncStops":                        TestCancelledSyncStops,
	"TestCommitFailureIsRecoveredByNextAttempt":     TestCommitFailureIsRecoveredByNextAttempt,
	"TestCommitRetriedWithinAttempt":                TestCommitRetriedWithinAttempt,
	"TestEmptyResumeStateIsKept":                    TestEmptyResumeStateIsKept,
	"TestFinalRecordAndFinish":                      TestFinalRecordAndFinish,
	"TestFinishErrorFailsSync":                      TestFinishErrorFailsSync,
	"TestFirstEpochSooner":                          TestFirstEpochSooner,
	"TestLagAndSnapshotReports":                     TestLagAndSnapshotReports,
	"TestLagMetrics":                                TestLagMetrics,
	"TestLostFirstEpochStartsOver":                  TestLostFirstEpochStartsOver,
	"TestManySplitsTinyEpochsStayAligned":           TestManySplitsTinyEpochsStayAligned,
	"TestOpenErrorFailsSync":                        TestOpenErrorFailsSync,
	"TestPauseReporterEvents":                       TestPauseReporterEvents,
	"TestRedactSecrets":                             TestRedactSecrets,
	"TestReopenGivesUp":                             TestReopenGivesUp,
	"TestReopenStartsANewAttempt":                   TestReopenStartsANewAttempt,
	"TestResumePointsWithoutRecordsAreCheckpointed": TestResumePointsWithoutRecordsAreCheckpointed,
	"TestRewindRenamesReopenWriters":                TestRewindRenamesReopenWriters,
	"TestRetriedSyncCountsEpochPastCommitPoint":     TestRetriedSyncCountsEpochPastCommitPoint,
	"TestRetryStopsWhenOvertaken":                   TestRetryStopsWhenOvertaken,
	"TestStopDuringFailedAttempt":                   TestStopDuringFailedAttempt,
	"TestRunLeavesNoGoroutines":                     TestRunLeavesNoGoroutines,
	"TestRunStopEvents":                             TestRunStopEvents,
	"TestRunStopRestartCycles":                      TestRunStopRestartCycles,
	"TestRunStopsWithCleanFinalCheckpoint":          TestRunStopsWithCleanFinalCheckpoint,
	"TestSchemaEvents":                              TestSchemaEvents,
	"TestSplitErrorFailsSync":                       TestSplitErrorFailsSync,
	"TestSplitWithoutFinalResumePointFailsSync":     TestSplitWithoutFinalResumePointFailsSync,
	"TestStoppedRunIsNotFinal":                      TestStoppedRunIsNotFinal,
	"TestSyncCancelAbandons":                        TestSyncCancelAbandons,
	"TestSyncResumesAfterMoreData":                  TestSyncResumesAfterMoreData,
	"TestValidate":                                  TestValidate,
	"TestZombieIsFenced":                            TestZombieIsFenced,
	"TestZombieManySplits":                          TestZombieManySplits,
}

// notInBubble are the tests TestInBubble leaves out, and why.
var notInBubble = map[string]string{
	"TestAcksOnlyVisibleEpochs":                    "it needs three epochs, which the bubble's clock closes as one or two: the reads outrun its timers",
	"TestFailedAttemptReleasesRecords":             "it runs subtests, which a bubble does not allow",
	"TestLoggerRedacts":                            "it runs subtests, which a bubble does not allow",
	"TestRecoverOutcomeWithoutHeadFailsSync":       "it runs subtests, which a bubble does not allow",
	"TestRecoveryEventsRetryLogsAndAttemptMetrics": "it runs subtests, which a bubble does not allow",
	"TestRunCancelWithIdleSplits":                  "it runs subtests, which a bubble does not allow",
	"TestRunnerReportsBackpressurePause":           "it runs subtests, which a bubble does not allow",
	"TestSyncExactlyOnce":                          "it runs subtests, which a bubble does not allow",
	"TestInBubble":                                 "itself",
	"TestRetryBudgetCountsOutages":                 "it runs subtests, each in a bubble of its own (it needs the fake clock)",
}

// TestInBubble runs each of inBubble in a bubble of its own, and fails
// when a test of the package is in neither list.
func TestInBubble(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "runner_test" {
			continue
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			if _, in := inBubble[fn.Name.Name]; !in && notInBubble[fn.Name.Name] == "" {
				t.Errorf("%s (%s): add it to inBubble in bubble_test.go, or to notInBubble with the reason", fn.Name.Name, name)
			}
		}
	}
	for name, test := range inBubble {
		t.Run(name, func(t *testing.T) { synctest.Test(t, test) })
	}
}

package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestQuickstartStatusPage runs the quickstart with -http on a free
// port: it announces the status page, serves it while it syncs and, once
// the sync is done, goes on serving it until interrupted, with the
// figures of the summary it printed in status.json; SIGINT then ends it
// cleanly.
func TestQuickstartStatusPage(t *testing.T) {
	const rows = 20_000
	cmd := exec.Command(bin, "-dir", t.TempDir(), "-rows", "20000", "-epoch", "200ms", "-http", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrLine := regexp.MustCompile(`status page: (http://127\.0\.0\.1:\d+/)`)
	var base string
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := addrLine.FindStringSubmatch(line); m != nil && base == "" {
			base = m[1]
			page := get(t, base)
			if !strings.Contains(page, "<title>OpenETL status</title>") {
				t.Errorf("GET %s while syncing: not the status page:\n%.300s", base, page)
			}
		}
		if strings.Contains(line, "still served") {
			break
		}
	}
	if base == "" || !strings.Contains(out.String(), "still served") {
		t.Fatalf("the quickstart did not announce its status page, or stopped serving it:\n%s", out.String())
	}
	sum := summary(t, out.String())
	var doc struct {
		Pipelines []struct {
			Name    string `json:"name"`
			Phase   string `json:"phase"`
			Streams []struct {
				Name   string `json:"name"`
				Totals struct {
					Read, Written, Quarantined int64
				} `json:"totals"`
			} `json:"streams"`
		} `json:"pipelines"`
	}
	if err := json.Unmarshal([]byte(get(t, base+"status.json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Pipelines) != 1 || doc.Pipelines[0].Name != "quickstart" || doc.Pipelines[0].Phase != "succeeded" ||
		len(doc.Pipelines[0].Streams) != 2 {
		t.Fatalf("status.json after the sync: %+v; want quickstart succeeded with two streams", doc)
	}
	for _, s := range doc.Pipelines[0].Streams {
		want := sum[s.Name]
		if s.Totals.Written != want.written || s.Totals.Quarantined != want.quarantined || s.Totals.Read != want.read ||
			want.read != rows {
			t.Errorf("stream %s: status.json %+v, summary %+v (read %d)", s.Name, s.Totals, want, rows)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the quickstart after SIGINT: %v", err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET %s: %v %s", url, err, res.Status)
	}
	return string(b)
}

package testutil

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	chromiumOnce sync.Once
	chromiumPath string
	chromiumErr  error
)

// Chromium returns a Chromium that runs headless: $OPENETL_CHROMIUM when
// set, else the one scripts/chromium.sh finds or installs (Debian's
// chromium package, idempotently and under the install lock of
// scripts/servers.sh). It fails the test when there is none: the browser
// is part of the check, never skipped.
func Chromium(t testing.TB) string {
	t.Helper()
	chromiumOnce.Do(func() {
		cmd := exec.Command(filepath.Join(Root(t), "scripts", "chromium.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		chromiumPath, chromiumErr = strings.TrimSpace(string(out)), err
	})
	if chromiumErr != nil {
		t.Fatalf("finding or installing chromium (scripts/chromium.sh): %v", chromiumErr)
	}
	return chromiumPath
}

// Browser is a headless Chromium with one page, driven over the Chrome
// DevTools Protocol through a pipe (--remote-debugging-pipe: JSON
// messages ending in a NUL byte on file descriptors 3 and 4), so no
// WebSocket client or driver from a registry is needed. Its methods are
// safe for concurrent use.
type Browser struct {
	t       testing.TB
	cmd     *exec.Cmd
	w       *os.File
	session string

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpReply
	dead    error
	done    chan struct{}
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// StartBrowser starts Chromium headless with a page of width × height
// CSS pixels, and kills it when the test ends.
func StartBrowser(t testing.TB, width, height int) *Browser {
	t.Helper()
	bin := Chromium(t)
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	profile := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
		"--user-data-dir="+profile, "--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--mute-audio", "--force-color-profile=srgb", fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, respW} // fds 3 and 4
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	cmdR.Close()
	respW.Close()
	b := &Browser{t: t, cmd: cmd, w: cmdW, pending: map[int]chan cdpReply{}, done: make(chan struct{})}
	go b.read(respR)
	t.Cleanup(func() {
		cmdW.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		respR.Close()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("chromium's stderr (last 2000 bytes): %s", tail(stderr.String(), 2000))
		}
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		t.Fatalf("chromium: create a page: %v", err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		t.Fatalf("chromium: attach to the page: %v", err)
	}
	b.session = att.SessionID
	if err := b.Call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height,
		"deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		t.Fatalf("chromium: set the viewport: %v", err)
	}
	return b
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (b *Browser) read(r *os.File) {
	br := bufio.NewReaderSize(r, 1<<20)
	var err error
	for {
		var msg []byte
		msg, err = br.ReadBytes(0)
		if err != nil {
			break
		}
		var m struct {
			ID int `json:"id"`
			cdpReply
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.cdpReply
		}
	}
	b.mu.Lock()
	b.dead = fmt.Errorf("chromium closed its pipe: %v", err)
	b.mu.Unlock()
	close(b.done)
}

// Call sends a DevTools command to the page and decodes its result into
// out (nil: ignored); it gives up after a minute.
func (b *Browser) Call(method string, params any, out any) error {
	return b.call(b.session, method, params, out)
}

func (b *Browser) call(session, method string, params any, out any) error {
	b.mu.Lock()
	if b.dead != nil {
		b.mu.Unlock()
		return b.dead
	}
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case rep := <-ch:
		if rep.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, rep.Error.Message, rep.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(rep.Result, out)
		}
		return nil
	case <-b.done:
		return fmt.Errorf("%s: %w", method, b.dead)
	case <-time.After(time.Minute):
		return fmt.Errorf("%s: no answer from chromium within a minute", method)
	}
}

// Navigate loads url in the page.
func (b *Browser) Navigate(url string) error {
	var res struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.Call("Page.navigate", map[string]any{"url": url}, &res); err != nil {
		return err
	}
	if res.ErrorText != "" {
		return fmt.Errorf("navigate to %s: %s", url, res.ErrorText)
	}
	return nil
}

// Eval evaluates the JavaScript expression expr in the page, waits for
// it when it is a promise, and decodes its value (JSON-serializable) into
// out (nil: ignored).
func (b *Browser) Eval(expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := b.Call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true,
		"awaitPromise": true}, &res); err != nil {
		return err
	}
	if ex := res.ExceptionDetails; ex != nil {
		msg := ex.Text
		if ex.Exception != nil {
			msg = ex.Exception.Description
		}
		return fmt.Errorf("javascript: %s", msg)
	}
	if out != nil && len(res.Result.Value) > 0 {
		return json.Unmarshal(res.Result.Value, out)
	}
	return nil
}

// WaitFor waits, inside the page (re-checking on every animation frame
// and DOM change), until the JavaScript expression cond is true, or
// fails with what describe (an expression) says of the page when ctx
// ends first.
func (b *Browser) WaitFor(ctx context.Context, cond string) error {
	js := `new Promise(function (resolve) {
		var check = function () { try { return !!(` + cond + `); } catch (e) { return false; } };
		if (check()) { resolve(true); return; }
		var obs = new MutationObserver(function () { if (check()) { obs.disconnect(); resolve(true); } });
		obs.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
	})`
	errCh := make(chan error, 1)
	go func() { errCh <- b.Eval(js, nil) }()
	select {
	case err := <-errCh:
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w", cond, context.Cause(ctx))
	}
}

// Screenshot saves a PNG of the whole page (resized to its content's
// height) at path.
func (b *Browser) Screenshot(path string, width int) error {
	var h int
	if err := b.Eval(`Math.ceil(document.documentElement.scrollHeight)`, &h); err != nil {
		return err
	}
	if err := b.Call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": h,
		"deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		return err
	}
	var shot struct {
		Data string `json:"data"`
	}
	if err := b.Call("Page.captureScreenshot", map[string]any{"format": "png"}, &shot); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

	http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package nodehost

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The decoys the host test lays where the node's stack writes, or where an
// older node-down swept: node-down must leave every one alone.
const (
	decoyMount  = "/run/containerd/sso-decoy"
	decoySocket = shimSocketDir + "/sso-decoy.sock"
	decoyChain  = "KUBE-DECOY"
	// A live container's log link of another kubelet, and a dangling link
	// (the kubelet's own log GC removes dangling *.log links, so this one
	// has another name).
	decoyLink     = logLinkDir + "/sso-decoy_default_app-0123.log"
	decoyDangling = logLinkDir + "/sso-decoy-dangling"
	decoyResult   = cniResultDir + "/" + Bridge + "-sso-decoy-eth0"
	decoyCgroup   = cgroupRoot + "/pids/k8s.io/sso-decoy"
)

// took is what the host test took from the host, to give back last first.
type took []func() error

// add remembers how to give one thing back.
func (t *took) add(give func() error) { *t = append(*t, give) }

// free gives everything back, last first.
func (t *took) free() error {
	var errs []error
	for i := len(*t) - 1; i >= 0; i-- {
		errs = append(errs, (*t)[i]())
	}
	*t = nil
	return errors.Join(errs...)
}

// mkdirs creates dir and its missing parents, remembering each to remove.
func (t *took) mkdirs(dir string) error {
	var missing []string
	for d := dir; !exists(d); d = filepath.Dir(d) {
		missing = append([]string{d}, missing...)
	}
	for _, d := range missing {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		t.add(func() error { return unix.Rmdir(d) })
	}
	return nil
}

// command runs name with args, remembering undo to run when it succeeded.
func (t *took) command(undo []string, name string, args ...string) error {
	if err := run(name, args...); err != nil {
		return err
	}
	t.add(func() error { return run(undo[0], undo[1:]...) })
	return nil
}

// nodeUp is test/cluster/node-up.sh.
func (n *Node) nodeUp() *exec.Cmd {
	return exec.Command(filepath.Join(n.Root, "test", "cluster", "node-up.sh"))
}

// timestamp is the scripts' log prefix.
var timestamp = regexp.MustCompile(`^\[[0-9:]*\] `)

// CheckRefusals takes, for each thing node-up needs, that thing as another
// program would (the kubelet's device-plugin socket, the bridge name, an
// address in BridgeCIDR, kube-proxy's KUBE-SERVICES chain), checks that
// node-up refuses naming it and changes nothing on the host, and gives it
// back.
func (n *Node) CheckRefusals() error {
	if n.present() {
		return errors.New("this clone's node is up or left over: run test/cluster/node-down.sh first")
	}
	// Nothing the cases take may exist already: it would not be theirs to give back.
	c, err := readClaims()
	if err != nil {
		return err
	}
	if p := refusals(c); len(p) > 0 {
		return fmt.Errorf("the host is not free for a node, so node-up's refusals cannot be tested: %s", strings.Join(p, "; "))
	}
	if err := os.MkdirAll(n.testDir(), 0o755); err != nil {
		return err
	}
	cases := []struct {
		what string
		take func(*took) error
	}{
		{kubeletSocket + " exists", func(t *took) error {
			if err := t.mkdirs(filepath.Dir(kubeletSocket)); err != nil {
				return err
			}
			t.add(func() error { return os.Remove(kubeletSocket) })
			return os.WriteFile(kubeletSocket, nil, 0o644)
		}},
		{"the network interface " + Bridge + " exists", func(t *took) error {
			return t.command([]string{"ip", "link", "del", Bridge}, "ip", "link", "add", Bridge, "type", "bridge")
		}},
		{"addresses in " + BridgeCIDR + " are in use", func(t *took) error {
			if err := t.command([]string{"ip", "link", "del", "sso-decoy0"}, "ip", "link", "add", "sso-decoy0", "type", "bridge"); err != nil {
				return err
			}
			return run("ip", "addr", "add", "10.88.0.7/24", "dev", "sso-decoy0")
		}},
		{"chain KUBE-SERVICES exists", func(t *took) error {
			return t.command([]string{"iptables", "-w", "-t", "nat", "-X", "KUBE-SERVICES"}, "iptables", "-w", "-t", "nat", "-N", "KUBE-SERVICES")
		}},
	}
	for _, c := range cases {
		var t took
		err := c.take(&t)
		if err == nil {
			err = n.expectRefusal(c.what)
		}
		if errFree := t.free(); errFree != nil && err == nil {
			err = fmt.Errorf("giving back what the case took: %w", errFree)
		}
		if err != nil {
			return fmt.Errorf("when %s: %w", c.what, err)
		}
	}
	return nil
}

// expectRefusal runs node-up, which must refuse naming what, and change nothing.
func (n *Node) expectRefusal(what string) error {
	before, err := CaptureState()
	if err != nil {
		return err
	}
	out, err := n.nodeUp().CombinedOutput()
	line := ""
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		if strings.Contains(s.Text(), what) {
			line = timestamp.ReplaceAllString(s.Text(), "")
			break
		}
	}
	if err == nil || !bytes.Contains(out, []byte(ErrRefused.Error())) || line == "" {
		os.Stderr.Write(out)
		return fmt.Errorf("node-up did not refuse (%v)", exitStatus(err))
	}
	now, err := CaptureState()
	if err != nil {
		return err
	}
	if diffs := Compare(before, now); len(diffs) > 0 {
		n.report("the host differs from before node-up (- before, + now):", diffs)
		return errors.New("node-up changed the host while refusing")
	}
	n.Logf("ok: node-up refused: %s", line)
	return nil
}

// exitStatus describes how a command ended.
func exitStatus(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// report logs a heading and the differences under it.
func (n *Node) report(heading string, lines []string) {
	n.Logf("%s", heading)
	for _, l := range lines {
		n.Logf("  %s", l)
	}
}

// decoysFile lists what LayDecoys made, one "KIND PATH" a line, for removeDecoys.
func (n *Node) decoysFile() string { return filepath.Join(n.testDir(), "decoys") }

// beforeState is the host as LayDecoys left it.
func (n *Node) beforeState() string { return filepath.Join(n.testDir(), "before.json") }

// LayDecoys lays decoys where the stack writes or where an older node-down
// swept (a tmpfs mounted under /run/containerd, a stale socket in
// /run/containerd/s, the chain KUBE-DECOY with a jump to it, a live and a
// dangling /var/log/containers link, a knbr0-* CNI result, a k8s.io cgroup),
// then records the host's State for CheckInterrupted and CheckRestored.
func (n *Node) LayDecoys() error {
	// The decoys of an earlier run that stopped half-way.
	if err := n.removeDecoys(); err != nil {
		return err
	}
	if err := os.RemoveAll(n.testDir()); err != nil {
		return err
	}
	if err := os.MkdirAll(n.testDir(), 0o755); err != nil {
		return err
	}
	f, err := os.Create(n.decoysFile())
	if err != nil {
		return err
	}
	defer f.Close()
	// Each decoy is listed before it is made, so that a failure half-way leaves none unlisted.
	made := func(kind, what string) error {
		_, err := fmt.Fprintln(f, kind, what)
		return err
	}
	for _, d := range []string{decoyMount, filepath.Dir(decoySocket), logLinkDir, cniResultDir, decoyCgroup} {
		var missing []string
		for p := d; !exists(p); p = filepath.Dir(p) {
			missing = append([]string{p}, missing...)
		}
		for _, p := range missing {
			if err := made("dir", p); err != nil {
				return err
			}
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
		}
	}
	steps := []struct {
		kind, what string
		lay        func() error
	}{
		{"mount", decoyMount, func() error { return unix.Mount("sso-decoy", decoyMount, "tmpfs", 0, "size=1m") }},
		// A socket nobody listens on, like a dead shim's.
		{"file", decoySocket, func() error {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Bind(fd, &unix.SockaddrUnix{Name: decoySocket})
		}},
		{"chain", decoyChain, func() error {
			if err := run("iptables", "-w", "-N", decoyChain); err != nil {
				return err
			}
			return run("iptables", "-w", "-A", "OUTPUT", "-j", decoyChain)
		}},
		{"file", decoyLink, func() error {
			if err := os.WriteFile(decoyMount+"/app.log", []byte("a log line\n"), 0o644); err != nil {
				return err
			}
			return os.Symlink(decoyMount+"/app.log", decoyLink)
		}},
		{"file", decoyDangling, func() error { return os.Symlink("/nonexistent/sso-decoy.log", decoyDangling) }},
		{"file", decoyResult, func() error { return os.WriteFile(decoyResult, []byte("{}\n"), 0o644) }},
	}
	for _, s := range steps {
		if err := made(s.kind, s.what); err != nil {
			return err
		}
		if err := s.lay(); err != nil {
			return fmt.Errorf("laying the decoy %s: %w", s.what, err)
		}
	}
	st, err := CaptureState()
	if err != nil {
		return err
	}
	if err := st.save(n.beforeState()); err != nil {
		return err
	}
	n.Logf("decoys laid and the host recorded in %s", n.testDir())
	return nil
}

// goneDecoys names the decoys that are no longer there.
func goneDecoys() []string {
	var gone []string
	points, _ := mountPoints()
	if !slices.Contains(points, decoyMount) {
		gone = append(gone, "the mount "+decoyMount)
	}
	if !exists(decoySocket) {
		gone = append(gone, decoySocket)
	}
	if run("iptables", "-w", "-S", decoyChain) != nil {
		gone = append(gone, "the chain "+decoyChain)
	}
	if run("iptables", "-w", "-C", "OUTPUT", "-j", decoyChain) != nil {
		gone = append(gone, "the jump OUTPUT -> "+decoyChain)
	}
	for _, l := range []string{decoyLink, decoyDangling} {
		if st, err := os.Lstat(l); err != nil || st.Mode()&os.ModeSymlink == 0 {
			gone = append(gone, "the link "+l)
		}
	}
	if st, err := os.Lstat(decoyResult); err != nil || !st.Mode().IsRegular() {
		gone = append(gone, decoyResult)
	}
	if st, err := os.Stat(decoyCgroup); err != nil || !st.IsDir() {
		gone = append(gone, "the cgroup "+decoyCgroup)
	}
	return gone
}

// removeDecoys removes what LayDecoys made, last first.
func (n *Node) removeDecoys() error {
	b, err := os.ReadFile(n.decoysFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	lines := splitLines(string(b))
	for i := len(lines) - 1; i >= 0; i-- {
		kind, what, _ := strings.Cut(lines[i], " ")
		switch kind {
		case "mount":
			_ = unix.Unmount(what, 0)
		case "file":
			_ = os.Remove(what)
		case "dir":
			_ = unix.Rmdir(what)
		case "chain":
			for run("iptables", "-w", "-D", "OUTPUT", "-j", what) == nil {
				// Every jump to it.
			}
			_ = run("iptables", "-w", "-X", what)
		}
	}
	// Made inside a folder that existed, so not listed.
	_ = unix.Rmdir(decoyCgroup)
	return os.Remove(n.decoysFile())
}

// CheckInterrupted, after LayDecoys, interrupts a node-up (TERM) once its
// control plane starts and checks that node-up undid everything it had
// done: the host is as LayDecoys recorded it.
func (n *Node) CheckInterrupted() error {
	before, err := loadState(n.beforeState())
	if err != nil {
		return fmt.Errorf("no record of the host (run the decoys phase first): %w", err)
	}
	logPath := filepath.Join(n.testDir(), "interrupted-node-up.log")
	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := n.nodeUp()
	cmd.Env = append(os.Environ(), "SKIP_TEKTON=1", "SKIP_DEPLOY=1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var exit error
	exited := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !exited; {
		if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("started kube-apiserver")) {
			break
		}
		select {
		case exit = <-done:
			exited = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !exited {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		exit = <-done
	}
	text, _ := os.ReadFile(logPath)
	if exit == nil || !bytes.Contains(text, []byte("node-up failed (exit 130); undoing")) {
		os.Stderr.Write(text)
		return fmt.Errorf("node-up, interrupted half-way, did not undo itself (%s)", exitStatus(exit))
	}
	if err := n.compare(before); err != nil {
		lines := splitLines(string(text))
		os.Stderr.WriteString(strings.Join(lines[max(0, len(lines)-30):], "\n") + "\n")
		return fmt.Errorf("node-up, interrupted half-way, left the host changed: %w", err)
	}
	n.Logf("ok: node-up interrupted after \"started kube-apiserver\" undid itself; the host is as it was")
	return nil
}

// compare checks that the decoys are intact and the host is in the state before.
func (n *Node) compare(before *State) error {
	gone := goneDecoys()
	if len(gone) > 0 {
		n.report("decoys gone:", gone)
	}
	now, err := CaptureState()
	if err != nil {
		return err
	}
	diffs := Compare(before, now)
	if len(diffs) > 0 {
		n.report("the host differs from before (- before, + now):", diffs)
	}
	if len(gone)+len(diffs) > 0 {
		return fmt.Errorf("%d decoys gone, %d differences (above)", len(gone), len(diffs))
	}
	return nil
}

// CheckRestored, after node-down, checks that the decoys are intact and the
// host is as LayDecoys recorded it (no new mounts, chains, rules, links,
// cgroups, paths; no changed sysctl), then removes the decoys.
func (n *Node) CheckRestored() error {
	before, err := loadState(n.beforeState())
	if err != nil {
		return fmt.Errorf("no record of the host (run the decoys phase before node-up): %w", err)
	}
	errCompare := n.compare(before)
	if err := n.removeDecoys(); err != nil {
		return err
	}
	if errCompare != nil {
		return fmt.Errorf("node-down did not leave the host as it was (%s): %w", n.testDir(), errCompare)
	}
	n.Logf("ok: the decoys are intact and the host is as it was before node-up")
	return nil
}

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

package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// StopTimeout is how long a stopped daemon gets before SIGKILL, as in
// test/cluster/lib.sh's stop_daemon.
const StopTimeout = 10 * time.Second

// Daemon is a process started the way test/cluster/lib.sh's start_daemon
// starts one: in a session of its own, its output appended to its log and
// its pid recorded, so that the scripts' stop_daemon stops it too.
type Daemon struct {
	// Name names its pid and log files.
	Name string
	// Cmd is the started process.
	Cmd *exec.Cmd

	dirs Dirs
	// logFrom is the log's size when the process started: what it logs
	// comes after.
	logFrom int64
	exited  chan struct{}
}

// Start starts cmd as daemon name, unless one of that name already runs.
func (d Dirs) Start(name string, cmd *exec.Cmd) (*Daemon, error) {
	if pid, ok := d.Running(name); ok {
		return nil, fmt.Errorf("%s already runs (pid %d)", name, pid)
	}
	for _, dir := range []string{d.PIDs, d.Logs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	out, err := os.OpenFile(d.LogFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the process holds its own copy
	st, err := out.Stat()
	if err != nil {
		return nil, err
	}
	dm := &Daemon{Name: name, Cmd: cmd, dirs: d, logFrom: st.Size(), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	// Waiting reaps it should it exit early: a zombie would still look alive.
	go func() { _ = cmd.Wait(); close(dm.exited) }()
	if err := os.WriteFile(d.PIDFile(name), []byte(strconv.Itoa(dm.PID())+"\n"), 0o644); err != nil {
		return nil, errors.Join(fmt.Errorf("pid file of %s: %w", name, err), dm.Stop())
	}
	rel, _ := filepath.Rel(d.Root, d.LogFile(name))
	Logf("started %s (pid %d), log %s", name, dm.PID(), rel)
	return dm, nil
}

// PID is the daemon's process id.
func (dm *Daemon) PID() int { return dm.Cmd.Process.Pid }

// LogFrom is the size its log had when it started.
func (dm *Daemon) LogFrom() int64 { return dm.logFrom }

// Logged is what the daemon logged since it started.
func (dm *Daemon) Logged() ([]byte, error) {
	return ReadFrom(dm.dirs.LogFile(dm.Name), dm.logFrom)
}

// WaitLog waits until match finds what the daemon logged since it started,
// failing early when it exits; its errors end with the log's last lines.
func (dm *Daemon) WaitLog(ctx context.Context, timeout time.Duration, match func([]byte) bool) error {
	deadline := time.After(timeout)
	for {
		logged, err := dm.Logged()
		if err != nil {
			return err
		}
		if match(logged) {
			return nil
		}
		select {
		case <-dm.exited:
			logged, _ = dm.Logged() // its last words
			return fmt.Errorf("%s exited; the end of its log:\n%s", dm.Name, LastLines(logged, 30))
		case <-deadline:
			return fmt.Errorf("%s not ready after %s; the end of its log:\n%s", dm.Name, timeout, LastLines(logged, 30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop sends the daemon SIGTERM, and SIGKILL if it still runs after
// StopTimeout, and removes its pid file.
func (dm *Daemon) Stop() error {
	defer os.Remove(dm.dirs.PIDFile(dm.Name))
	pid := dm.PID()
	if err := dm.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s (pid %d): %w", dm.Name, pid, err)
	}
	select {
	case <-dm.exited:
	case <-time.After(StopTimeout):
		Logf("%s (pid %d) ignored TERM; killing", dm.Name, pid)
		_ = dm.Cmd.Process.Kill()
		<-dm.exited
	}
	Logf("stopped %s (pid %d)", dm.Name, pid)
	return nil
}

// StopDaemons stops the daemons of names that another process started, as
// stop_daemon does: SIGTERM to each that runs, its pid file removed, and
// SIGKILL to those that still run after StopTimeout.
func (d Dirs) StopDaemons(names ...string) {
	type daemon struct {
		name string
		pid  int
	}
	var stopping []daemon
	for _, name := range names {
		if pid, ok := d.Running(name); ok {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			stopping = append(stopping, daemon{name, pid})
		}
		_ = os.Remove(d.PIDFile(name))
	}
	for _, s := range stopping {
		if !WaitGone(s.pid, StopTimeout) {
			Logf("%s (pid %d) ignored TERM; killing", s.name, s.pid)
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
		}
		Logf("stopped %s (pid %d)", s.name, s.pid)
	}
}

// WaitGone waits up to timeout for process pid to exit.
func WaitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for Alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
}

// ReadFrom returns the file at path from offset on.
func ReadFrom(path string, offset int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// LastLines is the last n lines of b.
func LastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// FreePorts returns n distinct TCP ports that nothing listens on, below the
// ephemeral range (32768+) so that no outgoing connection takes one meanwhile.
func FreePorts(n int) ([]int, error) {
	var ports []int
	taken := map[int]bool{}
	for i := 0; i < 200 && len(ports) < n; i++ {
		p := 20000 + rand.IntN(12000)
		if taken[p] {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		taken[p] = true
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, errors.New("no free port found")
	}
	return ports, nil
}

// Getenv returns the environment variable key, or def when it is empty.
func Getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

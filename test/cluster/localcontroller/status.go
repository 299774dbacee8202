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

package localcontroller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
)

// probesPort is sharedmain's fixed health-probe port (see the package doc).
const probesPort = 8080

// Leaders returns the numbers of the running instances that hold a Lease of
// the controller.
func (c *Controllers) Leaders(ctx context.Context) ([]int, error) {
	_, kube, err := c.Dirs.Up(ctx)
	if err != nil {
		return nil, err
	}
	dep, err := c.deployment()
	if err != nil {
		return nil, err
	}
	leases, err := kube.CoordinationV1().Leases(dep.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("leases of %s: %w", dep.Namespace, err)
	}
	var holders []string
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil {
			holders = append(holders, *l.Spec.HolderIdentity)
		}
	}
	runLogs := map[int][]byte{}
	for _, n := range c.Instances() {
		if _, ok := c.Dirs.Running(Name(n)); !ok {
			continue
		}
		offset := int64(0)
		if env, err := localcluster.ReadEnv(c.envFile(n)); err == nil {
			offset, _ = strconv.ParseInt(env["LOG_OFFSET"], 10, 64)
		}
		if b, err := localcluster.ReadFrom(c.Dirs.LogFile(Name(n)), offset); err == nil {
			runLogs[n] = b
		}
	}
	return leaders(holders, runLogs), nil
}

// leaders returns, in order, the instances whose log of the current run
// names one of the holders. A holder identity is the pod name and a random
// suffix that knative logs: the pod name alone would also match a killed
// run whose Lease has not expired yet.
func leaders(holders []string, runLogs map[int][]byte) []int {
	var out []int
	for n, log := range runLogs {
		for _, h := range holders {
			if h != "" && bytes.Contains(log, []byte(h)) {
				out = append(out, n)
				break
			}
		}
	}
	sort.Ints(out)
	return out
}

// Status writes the instances, their pids and ports, and which lead.
func (c *Controllers) Status(ctx context.Context, w io.Writer) {
	lead := map[int]bool{}
	if ns, err := c.Leaders(ctx); err == nil {
		for _, n := range ns {
			lead[n] = true
		}
	}
	for _, n := range c.Instances() {
		name := Name(n)
		if pid, ok := c.Dirs.Running(name); ok {
			line := fmt.Sprintf("%s: pid %d", name, pid)
			if listensOn(pid, probesPort) {
				env, _ := localcluster.ReadEnv(c.envFile(n))
				line += ", pprof :" + env["PROFILING_PORT"]
			}
			line += probesNote(pid, 0)
			if lead[n] {
				line += ", leader"
			} else {
				line += ", follower"
			}
			fmt.Fprintln(w, line)
		} else {
			fmt.Fprintf(w, "%s: not running\n", name)
		}
		fmt.Fprintf(w, "  log: %s\n", c.Dirs.LogFile(name))
	}
}

// probesNote says whether pid serves the health probes. sharedmain binds
// them just after logging "Starting controllers", so Start waits a little.
func probesNote(pid int, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for !listensOn(pid, probesPort) {
		if time.Now().After(deadline) {
			return fmt.Sprintf(", no probes nor pprof (:%d taken; see test/cluster/localcontroller)", probesPort)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Sprintf(", probes :%d", probesPort)
}

// listensOn reports whether process pid has a TCP socket listening on port.
func listensOn(pid, port int) bool {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range listeners(b, port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return false
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok && inodes[strings.TrimSuffix(ino, "]")] {
			return true
		}
	}
	return false
}

// listeners returns the socket inodes that listen on port in a
// /proc/net/tcp or tcp6 table.
func listeners(table []byte, port int) []string {
	const listen = "0A"
	var out []string
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != listen {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
			out = append(out, f[9])
		}
	}
	return out
}

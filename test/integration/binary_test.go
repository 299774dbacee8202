//go:build integration

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

package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// committerBin builds cmd/committer once (or uses $COMMITTER_BIN).
func (e *testEnv) committerBin(t *testing.T) string {
	t.Helper()
	e.binOnce.Do(func() {
		if b := os.Getenv("COMMITTER_BIN"); b != "" {
			e.bin = b
			return
		}
		e.bin = filepath.Join(e.tmp, "committer")
		out, err := exec.Command("go", "build", "-o", e.bin, "github.com/opensandbox-group/sandbox-snapshot-operator/cmd/committer").CombinedOutput()
		if err != nil {
			e.binErr = fmt.Errorf("go build cmd/committer: %v\n%s", err, out)
		}
	})
	if e.binErr != nil {
		t.Fatal(e.binErr)
	}
	return e.bin
}

// binCmd prepares a committer invocation for the pod, like the Task's steps.
func (e *testEnv) binCmd(t *testing.T, p *runningPod, step, mode, insecure, dockerConfig, results string, targets ...string) (*exec.Cmd, *bytes.Buffer) {
	args := []string{
		"--step=" + step, "--mode=" + mode,
		"--pod-name=" + p.name, "--pod-namespace=" + p.namespace,
		"--pod-uid=" + p.uid, "--run-id=" + p.runID,
		"--insecure-registry=" + insecure,
		"--containerd-address=" + e.ctrd.Address,
		"--copy-dir=" + e.copyDir,
		"--layer-dir=" + e.copyDir,
		"--docker-config=" + dockerConfig,
		"--pause-window-result=" + filepath.Join(results, "PAUSE_WINDOW_MS"),
		"--digests-result=" + filepath.Join(results, "DIGESTS"),
		"--images-result=" + filepath.Join(results, "IMAGES"),
		"--error-result=" + filepath.Join(results, "ERROR"),
	}
	cmd := exec.Command(e.committerBin(t), append(args, targets...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

func readResult(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("result %s: %v", name, err)
	}
	return string(b)
}

// TestBinaryStepsWithCredentials runs the commit and the push step as two
// processes, like the Task, with registries that require credentials: the
// base image comes from one authenticated registry (its blobs are gone from
// containerd, so they are fetched with pull credentials) and the target is
// another.
func TestBinaryStepsWithCredentials(t *testing.T) {
	e := requireEnv(t)
	ctx := e.ctrd.Ctx(context.Background())
	src := ctrharness.NewRegistryWithAuth("puller", "pull-secret-Xy9")
	defer src.Close()
	dst := ctrharness.NewRegistryWithAuth("pusher", "push-secret-Qz7")
	defer dst.Close()
	baseRef := src.Host + "/private/busybox:1"
	img, err := ctrharness.BusyboxImage(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrharness.PushImageAuth(baseRef, img, "puller", "pull-secret-Xy9"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ctrd.PullAuth(ctx, baseRef, "puller", "pull-secret-Xy9"); err != nil {
		t.Fatal(err)
	}
	defer e.ctrd.Client.ImageService().Delete(ctx, baseRef)

	p := e.startPod(t, podContainer{"app", baseRef})
	p.writeFile(t, "app", "/data/cred.txt", []byte("with-creds\n"))
	target := dst.Host + "/snap/" + p.name + "-app:gen7"

	cfgDir := t.TempDir()
	auth := func(u, pw string) string { return base64.StdEncoding.EncodeToString([]byte(u + ":" + pw)) }
	cfg := fmt.Sprintf(`{"auths":{%q:{"auth":%q},"http://%s/v1/":{"auth":%q}}}`,
		src.Host, auth("puller", "pull-secret-Xy9"), dst.Host, auth("pusher", "push-secret-Qz7"))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	results := t.TempDir()

	commit, out1 := e.binCmd(t, p, "commit", "commit", "true", cfgDir, results, "app="+target)
	if err := commit.Run(); err != nil {
		t.Fatalf("commit step: %v\n%s", err, out1)
	}
	e.assertAllRunning(t, p)
	e.deleteBaseBlobs(t, baseRef)
	push, out2 := e.binCmd(t, p, "push", "commit", "true", cfgDir, results, "app="+target)
	if err := push.Run(); err != nil {
		t.Fatalf("push step: %v\n%s", err, out2)
	}
	logs := out1.String() + out2.String()
	t.Logf("committer output:\n%s", logs)
	for _, secret := range []string{"pull-secret-Xy9", "push-secret-Qz7", auth("puller", "pull-secret-Xy9"), auth("pusher", "push-secret-Qz7")} {
		if strings.Contains(logs, secret) {
			t.Errorf("committer output reveals a secret")
		}
	}
	pw := readResult(t, results, "PAUSE_WINDOW_MS")
	digests := readResult(t, results, "DIGESTS")
	images := readResult(t, results, "IMAGES")
	t.Logf("PAUSE_WINDOW_MS=%s DIGESTS=%s IMAGES=%s", pw, digests, images)
	if pw == "" || strings.Trim(pw, "0123456789") != "" {
		t.Errorf("PAUSE_WINDOW_MS = %q", pw)
	}
	if !strings.HasPrefix(digests, "sha256:") || strings.Contains(digests, ",") {
		t.Errorf("DIGESTS = %q", digests)
	}
	if images != dst.Host+"/snap/"+p.name+"-app@"+digests {
		t.Errorf("IMAGES = %q", images)
	}
	// Verify in the registry with credentials.
	if _, err := e.ctrd.PullAuth(ctx, target, "pusher", "push-secret-Qz7"); err != nil {
		t.Fatalf("pull back: %v", err)
	}
	defer e.ctrd.Client.ImageService().Delete(ctx, target)
	got, err := e.ctrd.Client.GetImage(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got.Target().Digest.String() != digests {
		t.Errorf("registry manifest %s, DIGESTS %s", got.Target().Digest, digests)
	}
	code, outp, err := e.ctrd.RunToCompletion(ctx, "verify-"+randSuffix(), target, "cat", "/data/cred.txt")
	if err != nil || code != 0 || outp != "with-creds\n" {
		t.Errorf("run pushed image: code=%d err=%v out=%q", code, err, outp)
	}

	// Without credentials the push fails and says which image.
	p.writeFile(t, "app", "/data/cred.txt", []byte("again\n"))
	bad, out3 := e.binCmd(t, p, "all", "commit", "true", "", results, "app="+target)
	if err := bad.Run(); err == nil {
		t.Fatalf("push without credentials succeeded:\n%s", out3)
	}
	if code := bad.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d, want 1 (failed, containers thawed)", code)
	}
	if msg := readResult(t, results, "ERROR"); !strings.Contains(msg, target) || strings.Contains(msg, "\n") || len(msg) > task.MaxErrorLength {
		t.Errorf("ERROR result %q", msg)
	} else {
		t.Logf("ERROR result: %s", msg)
	}
	if !strings.Contains(out3.String(), target) || !strings.Contains(out3.String(), "UNAUTHORIZED") && !strings.Contains(out3.String(), "401") {
		t.Errorf("error output lacks the image or the auth failure:\n%s", out3)
	}
	e.assertAllRunning(t, p)
	_ = e.ctrd.Client.ImageService().Delete(ctx, target)
}

// waitPaused polls until every task is paused, or the process exits.
func waitPaused(ctx context.Context, p *runningPod, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("committer exited before all containers were paused")
		default:
		}
		all := true
		for _, task := range p.tasks {
			st, err := task.Status(ctx)
			if err != nil || st.Status != client.Paused {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return errors.New("containers never paused")
}

// startBigCommit starts the commit step on a pod whose diff is large enough
// (hundreds of MiB) to keep the pause window open while the test signals it.
func (e *testEnv) startBigCommit(t *testing.T) (*runningPod, *exec.Cmd, *bytes.Buffer, chan struct{}, string) {
	t.Helper()
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeBig(t, "app", "/data/big1.bin", 384<<20)
	p.writeFile(t, "sidecar", "/data/s.txt", []byte("s"))
	results := t.TempDir()
	cmd, out := e.binCmd(t, p, "commit", "commit", "true", "", results,
		"app="+e.regA.Host+"/snap/sig:1", "sidecar="+e.regA.Host+"/snap/sig-side:1")
	done := make(chan struct{})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(done) }()
	ctx := e.ctrd.Ctx(context.Background())
	if err := waitPaused(ctx, p, done, 30*time.Second); err != nil {
		<-done
		t.Fatalf("%v\n%s", err, out)
	}
	return p, cmd, out, done, results
}

func TestSIGTERMDuringCommitThaws(t *testing.T) {
	e := requireEnv(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p, cmd, out, done, results := e.startBigCommit(t)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			<-done
			t.Logf("committer output:\n%s", out)
			if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
				t.Errorf("exit code %d, want %d", code, 128+int(sig))
			}
			if !strings.Contains(out.String(), "thawed 2 containers") {
				t.Errorf("output does not report the thaw")
			}
			if msg := readResult(t, results, "ERROR"); !strings.Contains(msg, "thawed 2 containers") {
				t.Errorf("ERROR result %q", msg)
			}
			e.assertAllRunning(t, p)
		})
	}
}

func TestUnpauseMode(t *testing.T) {
	e := requireEnv(t)
	// SIGKILL cannot be handled: the containers stay frozen, as when the
	// commit pod is killed mid-pause. mode=unpause recovers them.
	p, cmd, out, done, _ := e.startBigCommit(t)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	ctx := e.ctrd.Ctx(context.Background())
	for n, task := range p.tasks {
		if st, _ := task.Status(ctx); st.Status != client.Paused {
			t.Fatalf("container %s is %s after SIGKILL, want paused (output %s)", n, st.Status, out)
		}
	}
	// A third container paused by somebody else must stay paused.
	other, otherTask, err := e.ctrd.Run(ctx, ctrharness.PodContainer{ID: p.name + "-other", Pod: p.name, PodNamespace: p.namespace, PodUID: p.uid, Name: "other", Image: e.dockerBase}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.ctrd.DeleteContainer(ctx, other)
	if err := otherTask.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	targets := []string{"app=" + e.regA.Host + "/snap/sig:1", "sidecar=" + e.regA.Host + "/snap/sig-side:1", "other=" + e.regA.Host + "/snap/o:1"}
	for i := 0; i < 2; i++ { // idempotent; the operator passes no containers
		results := t.TempDir()
		args := targets
		if i == 0 {
			args = nil
		}
		for _, step := range []string{"commit", "push"} {
			un, uout := e.binCmd(t, p, step, "unpause", "false", "", results, args...)
			if err := un.Run(); err != nil {
				t.Fatalf("unpause run %d step %s: %v\n%s", i, step, err, uout)
			}
			t.Logf("unpause run %d step %s:\n%s", i, step, uout)
		}
		e.assertAllRunning(t, p)
		if st, _ := otherTask.Status(ctx); st.Status != client.Paused {
			t.Errorf("container paused by somebody else was thawed (%s)", st.Status)
		}
		if got := readResult(t, results, "PAUSE_WINDOW_MS"); got != "0" {
			t.Errorf("PAUSE_WINDOW_MS = %q", got)
		}
	}
	_ = otherTask.Resume(ctx)

	// The killed run's pod lock died with its process: another run of the
	// pod takes it and commits.
	p.runID = "run-after-kill-" + randSuffix()
	next, nout := e.binCmd(t, p, "commit", "commit", "true", "", t.TempDir(), "app="+e.regA.Host+"/snap/after-kill:1")
	if err := next.Run(); err != nil {
		t.Errorf("commit after the killed run: %v\n%s", err, nout)
	}
	e.assertAllRunning(t, p)
}

// TestBinaryPushTrustsRegistryCA pushes, as the Task's steps do, to a
// registry whose certificate a private CA signed, with insecure-registry
// false: without that CA the push step refuses the certificate; with the
// CA's PEM file in --registry-ca-dir (the registry-ca volume) it pushes.
func TestBinaryPushTrustsRegistryCA(t *testing.T) {
	e := requireEnv(t)
	dst := httptest.NewTLSServer(ggcrregistry.New())
	defer dst.Close()
	caDir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: dst.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(caDir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	// The base lives on the TLS registry too, under the name the pod runs
	// from, so that a base blob containerd lacks (an earlier test may have
	// removed them, deleteBaseBlobs) is mounted there, never fetched from
	// the base's plain-HTTP registry, which insecure-registry false refuses.
	host := strings.TrimPrefix(dst.URL, "https://")
	roots := x509.NewCertPool()
	roots.AddCert(dst.Certificate())
	baseRef, err := name.ParseReference(host+"/base/busybox:tls", name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	tlsTransport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	if err := remote.Write(baseRef, remoteImage(t, e.ociBase), remote.WithTransport(tlsTransport)); err != nil {
		t.Fatal(err)
	}
	ctx := e.ctrd.Ctx(context.Background())
	is := e.ctrd.Client.ImageService()
	base, err := is.Get(ctx, e.ociBase)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := is.Create(ctx, images.Image{Name: baseRef.String(), Target: base.Target}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { is.Delete(ctx, baseRef.String()) })
	p := e.startPod(t, podContainer{"app", baseRef.String()})
	p.writeFile(t, "app", "/data/tls.txt", []byte("over TLS\n"))
	target := host + "/snap/" + p.name + "-app:1"
	results := t.TempDir()
	step := func(step string, caDir string) (*exec.Cmd, *bytes.Buffer) {
		cmd, out := e.binCmd(t, p, step, "commit", "false", t.TempDir(), results, "app="+target)
		if caDir != "" {
			cmd.Args = append([]string{cmd.Args[0], "--registry-ca-dir=" + caDir}, cmd.Args[1:]...)
		}
		return cmd, out
	}
	for _, tc := range []struct {
		caDir string
		want  string
	}{{"", "certificate signed by unknown authority"}, {caDir, ""}} {
		commit, out := step("commit", tc.caDir)
		if err := commit.Run(); err != nil {
			t.Fatalf("commit step: %v\n%s", err, out)
		}
		push, out := step("push", tc.caDir)
		err := push.Run()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(out.String(), tc.want)) {
			t.Fatalf("push step with --registry-ca-dir=%q: %v, want %q\n%s", tc.caDir, err, tc.want, out)
		}
	}
	if d := readResult(t, results, "DIGESTS"); !strings.Contains(d, "sha256:") {
		t.Errorf("DIGESTS result %q", d)
	}
}

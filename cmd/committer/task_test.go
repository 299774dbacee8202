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

package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

func loadTask(t *testing.T) *pipelinev1.Task {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "tasks", "sandbox-commit", "sandbox-commit.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tk pipelinev1.Task
	if err := yaml.UnmarshalStrict(b, &tk); err != nil {
		t.Fatal(err)
	}
	return &tk
}

// TestTaskMatchesContract checks the Task against Tekton's validation and the
// names shared with the operator in pkg/task.
func TestTaskMatchesContract(t *testing.T) {
	tk := loadTask(t)
	if tk.Name != task.Name {
		t.Errorf("name %q", tk.Name)
	}
	if err := tk.Validate(context.Background()); err != nil {
		t.Fatalf("tekton validation: %v", err)
	}
	params := map[string]pipelinev1.ParamSpec{}
	for _, p := range tk.Spec.Params {
		params[p.Name] = p
	}
	for _, n := range []string{task.ParamPodName, task.ParamPodNamespace, task.ParamPodUID, task.ParamRunID, task.ParamContainers, task.ParamInsecureRegistry, task.ParamMode} {
		if _, ok := params[n]; !ok {
			t.Errorf("param %s missing", n)
		}
	}
	if params[task.ParamRunID].Default != nil || params[task.ParamRunID].Type != pipelinev1.ParamTypeString {
		t.Errorf("param %s must be a required string param", task.ParamRunID)
	}
	// mode=release may run long after the pod went: the committer requires
	// pod-uid for the other modes.
	if d := params[task.ParamPodUID].Default; d == nil || d.StringVal != "" || params[task.ParamPodUID].Type != pipelinev1.ParamTypeString {
		t.Errorf("param %s must be a string param defaulting to \"\"", task.ParamPodUID)
	}
	if params[task.ParamContainers].Type != pipelinev1.ParamTypeArray {
		t.Error("containers must be an array param")
	}
	if d := params[task.ParamInsecureRegistry].Default; d == nil || d.StringVal != "false" {
		t.Error("insecure-registry must default to \"false\"")
	}
	if d := params[task.ParamMode].Default; d == nil || d.StringVal != task.ModeCommit {
		t.Error("mode must default to commit")
	}
	if d := params[task.ParamMaxLayers].Default; d == nil || d.StringVal != strconv.Itoa(task.DefaultMaxLayers) {
		t.Errorf("max-layers must default to %d", task.DefaultMaxLayers)
	}
	for name, want := range map[string]string{
		task.ParamMaxPause:         task.DefaultMaxPause.String(),
		task.ParamKeepLocal:        strconv.FormatBool(task.DefaultKeepLocal),
		task.ParamKeepLocalMaxSize: task.DefaultKeepLocalMaxSize,
		task.ParamDiskReserve:      task.DefaultDiskReserve,
	} {
		if d := params[name].Default; d == nil || d.StringVal != want {
			t.Errorf("%s must default to %s, as the committer and config-snapshot do", name, want)
		}
	}
	if d := params[task.ParamSnapshotMode].Default; d == nil || d.StringVal != task.SnapshotModeFilesystem {
		t.Errorf("snapshot-mode must default to %s", task.SnapshotModeFilesystem)
	}
	if d := params[task.ParamMemoryFallback].Default; d == nil || d.StringVal != task.MemoryFallbackNone {
		t.Errorf("memory-fallback must default to %s", task.MemoryFallbackNone)
	}
	if d := params[task.ParamMemoryRestoreBase].Default; d == nil || d.StringVal != "" {
		t.Errorf("%s must default to none", task.ParamMemoryRestoreBase)
	}
	if d := params[task.ParamMemoryAnonymousPull].Default; d == nil || d.StringVal != task.MemoryAnonymousPullRefuse {
		t.Errorf("%s must default to %s", task.ParamMemoryAnonymousPull, task.MemoryAnonymousPullRefuse)
	}
	if d := params[task.ParamCheckpointDir].Default; d == nil || d.StringVal != task.DefaultCheckpointDir {
		t.Errorf("checkpoint-dir must default to %s", task.DefaultCheckpointDir)
	}
	results := map[string]bool{}
	for _, r := range tk.Spec.Results {
		results[r.Name] = true
	}
	for _, n := range []string{task.ResultDigests, task.ResultImages, task.ResultPauseWindowMS, task.ResultSnapshotMode, task.ResultError} {
		if !results[n] {
			t.Errorf("result %s missing", n)
		}
	}
	if len(tk.Spec.Workspaces) != 1 || tk.Spec.Workspaces[0].Name != task.WorkspaceDockerConfig || !tk.Spec.Workspaces[0].Optional || !tk.Spec.Workspaces[0].ReadOnly {
		t.Errorf("workspaces %+v", tk.Spec.Workspaces)
	}
	for _, v := range tk.Spec.Volumes {
		if v.Name == task.SocketVolume {
			t.Errorf("the Task must not declare volume %s: the TaskRun's pod template supplies it", v.Name)
		}
	}
	if len(tk.Spec.Steps) != 2 || tk.Spec.Steps[0].Name != task.StepCommit || tk.Spec.Steps[1].Name != task.StepPush {
		t.Fatalf("steps must be commit then push")
	}
	st := tk.Spec.StepTemplate
	if st == nil || st.Image != "ko://github.com/opensandbox-group/sandbox-snapshot-operator/cmd/committer" {
		t.Fatal("step template image")
	}
	if len(st.VolumeMounts) != 1 || st.VolumeMounts[0].Name != task.SocketVolume || st.VolumeMounts[0].MountPath != "/run/containerd/containerd.sock" {
		t.Errorf("socket mount %+v", st.VolumeMounts)
	}
	// Both steps read the memory snapshot's dump: the push builds its image.
	// The commit step sweeps the dumps of runs that are over, in every mode.
	for _, s := range tk.Spec.Steps {
		if !slices.ContainsFunc(s.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == task.CheckpointVolume && m.MountPath == "$(params."+task.ParamCheckpointDir+")"
		}) {
			t.Errorf("step %s does not mount volume %s at checkpoint-dir: %+v", s.Name, task.CheckpointVolume, s.VolumeMounts)
		}
	}
	sc := st.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 ||
		sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile == nil || sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("securityContext %+v", sc)
	}
}

// TestTaskArgsParse substitutes the Task's variables like Tekton does and
// checks that the committer accepts every step's arguments, for a commit run
// (a memory snapshot with the fallback), for an unpause run, which passes no
// containers, and for a release run, which passes no pod UID either.
func TestTaskArgsParse(t *testing.T) {
	const podUID = "0f4c1f4e-7d0a-4a51-9d3b-2f7e0c1a9b11"
	t.Run("commit", func(t *testing.T) {
		testTaskArgs(t, task.ModeCommit, podUID, []string{"app=127.0.0.1:5000/snap/a:1", "side=127.0.0.1:5000/snap/b:1"})
	})
	t.Run("unpause", func(t *testing.T) { testTaskArgs(t, task.ModeUnpause, podUID, nil) })
	t.Run("release", func(t *testing.T) { testTaskArgs(t, task.ModeRelease, "", nil) })
}

func testTaskArgs(t *testing.T, mode, podUID string, containers []string) {
	const taskPodUID = "5d0c9e2a-1b7f-4c3e-9a60-7f1e2d3c4b5a"
	tk := loadTask(t)
	repl := strings.NewReplacer(
		"$(params.mode)", mode,
		"$(params.pod-name)", "sb1-0",
		"$(params.pod-namespace)", "default",
		"$(params.pod-uid)", podUID,
		"$(params.run-id)", "7244861d-0adf-4dbe-91a8-b976efd1365b",
		"$(params.insecure-registry)", "false",
		"$(params.max-pause)", "20s",
		"$(params.max-layers)", "16",
		"$(params.keep-local)", "true",
		"$(params.keep-local-max-size)", "20Gi",
		"$(params.disk-reserve)", "3%",
		"$(params.snapshot-mode)", task.SnapshotModeMemory,
		"$(params.memory-fallback)", task.MemoryFallbackFilesystem,
		"$(params.memory-restore-base)", "registry.example.com/restore-base@sha256:"+strings.Repeat("b", 64),
		"$(params.memory-anonymous-pull)", task.MemoryAnonymousPullAllow,
		"$(params.checkpoint-dir)", task.DefaultCheckpointDir,
		"$(results.SNAPSHOT_MODE.path)", "/tekton/results/SNAPSHOT_MODE",
		"$(workspaces.dockerconfig.path)", "",
		"$(results.PAUSE_WINDOW_MS.path)", "/tekton/results/PAUSE_WINDOW_MS",
		"$(results.DIGESTS.path)", "/tekton/results/DIGESTS",
		"$(results.IMAGES.path)", "/tekton/results/IMAGES",
		"$(results.ERROR.path)", "/tekton/results/ERROR",
	)
	for _, s := range tk.Spec.Steps {
		// Kubernetes expands $(VAR) of the step's own env in its args; the
		// Task pod's UID and the step's ephemeral-storage limit (in bytes)
		// come from the downward API.
		var envRepl []string
		for _, ev := range s.Env {
			switch {
			case ev.ValueFrom != nil && ev.ValueFrom.FieldRef != nil && ev.ValueFrom.FieldRef.FieldPath == "metadata.uid":
				envRepl = append(envRepl, "$("+ev.Name+")", taskPodUID)
			case ev.ValueFrom != nil && ev.ValueFrom.ResourceFieldRef != nil && ev.ValueFrom.ResourceFieldRef.Resource == "limits.ephemeral-storage":
				envRepl = append(envRepl, "$("+ev.Name+")", "21474836480")
			}
		}
		var args []string
		for _, a := range s.Args {
			if a == "$(params.containers[*])" {
				args = append(args, containers...)
				continue
			}
			a = strings.NewReplacer(envRepl...).Replace(repl.Replace(a))
			if strings.Contains(a, "$(") {
				t.Fatalf("step %s: unsubstituted %q", s.Name, a)
			}
			args = append(args, a)
		}
		var o options
		fs := newFlagSet(&o)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("step %s: %v", s.Name, err)
		}
		if o.step != s.Name {
			t.Errorf("step %s runs --step=%s", s.Name, o.step)
		}
		p, err := task.ParseParams(rawParams(o, fs.Args()))
		if err != nil {
			t.Fatalf("step %s: %v", s.Name, err)
		}
		if p.PodUID != podUID || p.RunID != "7244861d-0adf-4dbe-91a8-b976efd1365b" {
			t.Errorf("step %s does not pass pod-uid and run-id: %+v", s.Name, p)
		}
		if len(p.Targets) != len(containers) || p.Mode != mode || o.errorPath == "" {
			t.Errorf("step %s: %+v", s.Name, o)
		}
		if s.Name == task.StepCommit && (p.SnapshotMode != task.SnapshotModeMemory || p.MemoryFallback != task.MemoryFallbackFilesystem ||
			o.checkpointDir != task.DefaultCheckpointDir || o.snapshotModePath == "" ||
			!strings.HasPrefix(p.MemoryRestoreBase, "registry.example.com/restore-base@") || !p.AllowAnonymousPull || p.DiskReserve.String() != "3%") {
			t.Errorf("step commit does not pass the snapshot mode, its fallback, its restore base, its anonymous pulls, the checkpoint dir, disk-reserve and the SNAPSHOT_MODE result: %+v", o)
		}
		// The commit step names its Task pod, which owns the memory
		// snapshot it writes, in every mode: a later run sweeps it by it.
		if s.Name == task.StepCommit && p.TaskPodUID != taskPodUID {
			t.Errorf("step commit does not pass its pod's UID from the downward API: %+v", o)
		}
		// The push step builds a memory snapshot's image from the commit
		// step's dump.
		if o.checkpointDir != task.DefaultCheckpointDir || o.layerDir == "" {
			t.Errorf("step %s does not pass the checkpoint dir and the layer dir: %+v", s.Name, o)
		}
	}
}

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

package task

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation"
)

// RawParams holds the Task parameters exactly as Tekton passes them. An
// empty tunable (MaxPause to MemoryAnonymousPull) leaves its Params field
// zero; the Task and the committer's flags always pass one.
type RawParams struct {
	PodName             string
	PodNamespace        string
	PodUID              string
	RunID               string
	TaskPodUID          string
	Containers          []string
	InsecureRegistry    string
	Mode                string
	SnapshotMode        string
	MemoryFallback      string
	MaxPause            string
	MaxLayers           string
	KeepLocal           string
	KeepLocalMaxSize    string
	DiskReserve         string
	MemoryRestoreBase   string
	MemoryAnonymousPull string
}

// Target is one "<containerName>=<imageURI>" item of the containers param.
type Target struct {
	// Container is the Kubernetes container name inside the pod.
	Container string
	// Image is the target image URI exactly as given (registry/repo:tag).
	Image string
	// Tag is the parsed, strictly validated target reference.
	Tag name.Tag
}

// Repository returns the image URI without its tag, as used for the IMAGES result.
func (t Target) Repository() string {
	return strings.TrimSuffix(t.Image, ":"+t.Tag.TagStr())
}

// Params is the validated form of RawParams.
type Params struct {
	PodName      string
	PodNamespace string
	// PodUID selects the pod's containers by io.kubernetes.pod.uid.
	PodUID string
	// RunID is the value of LabelPausedBy on the containers this run pauses.
	RunID string
	// TaskPodUID is the UID of the pod this run's steps run in, which owns
	// the checkpoint archives they write; empty outside a pod.
	TaskPodUID string
	Targets    []Target
	Insecure   bool
	Mode       string
	// SnapshotMode is SnapshotModeFilesystem or SnapshotModeMemory.
	SnapshotMode string
	// MemoryFallback is MemoryFallbackNone or MemoryFallbackFilesystem.
	MemoryFallback string
	// MaxPause bounds the time containers stay frozen; 0 means DefaultMaxPause.
	MaxPause time.Duration
	// MaxLayers bounds the layers a sandbox's commits stack on its base
	// image, past which a commit squashes them; 0 means no bound.
	MaxLayers int
	// KeepLocal keeps pushed images in containerd for a resume on the node;
	// KeepLocalMaxBytes bounds the bytes of all kept snapshot images (0: no
	// image is kept past its push but those in use).
	KeepLocal         bool
	KeepLocalMaxBytes int64
	// DiskReserve is what the snapshot leaves free on each node filesystem
	// it writes to.
	DiskReserve DiskReserve
	// MemoryRestoreBase is the image, pinned by digest, a restore starts a
	// memory snapshot from where it cannot pull the container's base image.
	MemoryRestoreBase string
	// AllowAnonymousPull lets a memory snapshot go to a repository anyone
	// may pull from.
	AllowAnonymousPull bool
}

// ParseParams validates raw Task parameters. It never touches containerd, so
// every error is reported before any container is paused.
func ParseParams(in RawParams) (*Params, error) {
	p := &Params{PodName: in.PodName, PodNamespace: in.PodNamespace, PodUID: in.PodUID, RunID: in.RunID, TaskPodUID: in.TaskPodUID}
	if in.PodName == "" {
		return nil, fmt.Errorf("param pod-name is empty")
	}
	if errs := validation.IsDNS1123Subdomain(in.PodName); len(errs) > 0 {
		return nil, fmt.Errorf("param pod-name %q is invalid: %s", in.PodName, strings.Join(errs, "; "))
	}
	if in.PodNamespace == "" {
		return nil, fmt.Errorf("param pod-namespace is empty")
	}
	if errs := validation.IsDNS1123Label(in.PodNamespace); len(errs) > 0 {
		return nil, fmt.Errorf("param pod-namespace %q is invalid: %s", in.PodNamespace, strings.Join(errs, "; "))
	}
	if err := ValidateID(ParamPodUID, in.PodUID); err != nil && !(in.Mode == ModeRelease && in.PodUID == "") {
		return nil, fmt.Errorf("pod %s/%s: %w", in.PodNamespace, in.PodName, err)
	}
	if err := ValidateID(ParamRunID, in.RunID); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", in.PodNamespace, in.PodName, err)
	}
	switch in.InsecureRegistry {
	case "true":
		p.Insecure = true
	case "false":
	default:
		return nil, fmt.Errorf("param insecure-registry must be \"true\" or \"false\", got %q", in.InsecureRegistry)
	}
	switch in.Mode {
	case "", ModeCommit:
		p.Mode = ModeCommit
	case ModeUnpause, ModeRelease:
		p.Mode = in.Mode
	default:
		return nil, fmt.Errorf("param mode must be %q, %q or %q, got %q", ModeCommit, ModeUnpause, ModeRelease, in.Mode)
	}
	// Only a commit writes what its Task pod owns: an unpause, which may have
	// containers to thaw, or a release does not fail for it.
	if err := ValidateID(FlagTaskPodUID, in.TaskPodUID); err != nil && in.TaskPodUID != "" {
		if p.Mode == ModeCommit {
			return nil, fmt.Errorf("pod %s/%s: %w", in.PodNamespace, in.PodName, err)
		}
		p.TaskPodUID = ""
	}
	var err error
	if p.SnapshotMode, err = eitherOr(ParamSnapshotMode, in.SnapshotMode, SnapshotModeFilesystem, SnapshotModeMemory); err != nil {
		return nil, err
	}
	if p.MemoryFallback, err = eitherOr(ParamMemoryFallback, in.MemoryFallback, MemoryFallbackNone, MemoryFallbackFilesystem); err != nil {
		return nil, err
	}
	if err := p.parseTunables(in); err != nil {
		return nil, err
	}
	if len(in.Containers) == 0 && p.Mode == ModeCommit {
		return nil, fmt.Errorf("param containers is empty: pod %s/%s needs at least one \"<container>=<image>\" item", in.PodNamespace, in.PodName)
	}
	seenC := map[string]bool{}
	seenI := map[string]string{}
	for _, item := range in.Containers {
		t, err := ParseTarget(item, p.Insecure)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", in.PodNamespace, in.PodName, err)
		}
		if seenC[t.Container] {
			return nil, fmt.Errorf("pod %s/%s: container %q is listed twice in param containers", in.PodNamespace, in.PodName, t.Container)
		}
		// One repository per container: a run names its images by
		// repository (the committer names its working images by repository).
		key := t.Tag.Context().Name()
		if other, ok := seenI[key]; ok {
			return nil, fmt.Errorf("pod %s/%s: containers %q and %q both target repository %s", in.PodNamespace, in.PodName, other, t.Container, t.Repository())
		}
		seenC[t.Container] = true
		seenI[key] = t.Container
		p.Targets = append(p.Targets, t)
	}
	return p, nil
}

// parseTunables parses the tunable params of in, those config-snapshot
// sets, with the parsers the controller uses; an empty one keeps its
// default.
func (p *Params) parseTunables(in RawParams) error {
	var errs []error
	parse := func(param, v string, f func(string) error) {
		if v == "" {
			return
		}
		if err := f(v); err != nil {
			errs = append(errs, fmt.Errorf("param %s: %w", param, err))
		}
	}
	parse(ParamMaxPause, in.MaxPause, func(v string) (err error) { p.MaxPause, err = ParseMaxPause(v); return })
	parse(ParamMaxLayers, in.MaxLayers, func(v string) (err error) { p.MaxLayers, err = ParseMaxLayers(v); return })
	parse(ParamKeepLocal, in.KeepLocal, func(v string) (err error) { p.KeepLocal, err = ParseKeepLocal(v); return })
	parse(ParamKeepLocalMaxSize, in.KeepLocalMaxSize, func(v string) (err error) {
		p.KeepLocalMaxBytes, err = ParseKeepLocalMaxSize(v)
		return
	})
	parse(ParamDiskReserve, in.DiskReserve, func(v string) (err error) { p.DiskReserve, err = ParseDiskReserve(v); return })
	parse(ParamMemoryRestoreBase, in.MemoryRestoreBase, func(v string) (err error) {
		p.MemoryRestoreBase, err = ParseMemoryRestoreBase(v)
		return
	})
	parse(ParamMemoryAnonymousPull, in.MemoryAnonymousPull, func(v string) (err error) {
		p.AllowAnonymousPull, err = ParseMemoryAnonymousPull(v)
		return
	})
	return errors.Join(errs...)
}

// eitherOr checks that param's value v is def (also when empty) or other.
func eitherOr(param, v, def, other string) (string, error) {
	switch v {
	case "":
		return def, nil
	case def, other:
		return v, nil
	}
	return "", fmt.Errorf("param %s must be %q or %q, got %q", param, def, other, v)
}

// FlagTaskPodUID names the committer's flag, and Params.TaskPodUID, in
// errors: the UID of the Task's own pod, which Tekton does not pass as a
// param (the Task takes it from the downward API).
const FlagTaskPodUID = "task-pod-uid"

// maxIDLength bounds pod-uid and run-id; Kubernetes UIDs are 36 characters.
const maxIDLength = 128

// ValidateID checks a pod-uid or run-id value: Kubernetes UIDs are UUIDs, so
// letters, digits and dashes are enough, and the value is safe in a label
// filter and in a containerd lock reference.
func ValidateID(param, v string) error {
	if v == "" {
		return fmt.Errorf("param %s is empty", param)
	}
	if len(v) > maxIDLength {
		return fmt.Errorf("param %s is longer than %d characters", param, maxIDLength)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("param %s %q may only hold letters, digits and '-'", param, v)
		}
	}
	return nil
}

// ParseTarget parses one "<containerName>=<imageURI>" item. The image must be a
// fully specified tag reference (registry, repository and tag; no digest).
func ParseTarget(item string, insecure bool) (Target, error) {
	cname, img, ok := strings.Cut(item, "=")
	if !ok {
		return Target{}, fmt.Errorf("containers item %q is not of the form <container>=<image>", item)
	}
	if cname == "" {
		return Target{}, fmt.Errorf("containers item %q has an empty container name", item)
	}
	if errs := validation.IsDNS1123Label(cname); len(errs) > 0 {
		return Target{}, fmt.Errorf("containers item %q: container name is invalid: %s", item, strings.Join(errs, "; "))
	}
	if img == "" {
		return Target{}, fmt.Errorf("container %q: image is empty", cname)
	}
	opts := []name.Option{name.StrictValidation}
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(img, opts...)
	if err != nil {
		return Target{}, fmt.Errorf("container %q: image %q is not a fully qualified <registry>/<repository>:<tag> reference: %v", cname, img, err)
	}
	tag, isTag := ref.(name.Tag)
	if !isTag || strings.Contains(img, "@") {
		return Target{}, fmt.Errorf("container %q: image %q must be a tag reference, not a digest", cname, img)
	}
	// Strict parsing still accepts "repo:tag" with an implied registry when
	// the first path component looks like a host; require an explicit one.
	if first, _, _ := strings.Cut(img, "/"); !strings.ContainsAny(first, ".:") && first != "localhost" {
		return Target{}, fmt.Errorf("container %q: image %q has no registry host", cname, img)
	}
	return Target{Container: cname, Image: img, Tag: tag}, nil
}

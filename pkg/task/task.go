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

// Package task holds the contract of the sandbox-commit Task: its name, the
// params the operator passes and the results the committer writes. The
// operator and the committer both build on it, so neither can drift.
package task

// Name is the default name of the commit Task in tasks/sandbox-commit.
const Name = "sandbox-commit"

// Param names.
const (
	ParamPodName      = "pod-name"
	ParamPodNamespace = "pod-namespace"
	// ParamPodUID is the pod's UID; only containers of that pod are touched.
	// ModeRelease touches no container and needs none.
	ParamPodUID = "pod-uid"
	// ParamRunID marks the containers a commit freezes. An unpause run takes
	// the run ID of the commit it cleans up after and thaws only those.
	ParamRunID            = "run-id"
	ParamContainers       = "containers"
	ParamInsecureRegistry = "insecure-registry"
	ParamMode             = "mode"
	// ParamOverlayfsRoot is where the commit step mounts OverlayfsVolume.
	ParamOverlayfsRoot = "overlayfs-root"
	// ParamMaxLayers bounds the layers a sandbox's commits stack on its
	// base image; past it a commit squashes them into one (ParseMaxLayers).
	ParamMaxLayers = "max-layers"
	// ParamSnapshotMode selects what a commit captures: SnapshotModeFilesystem
	// or SnapshotModeMemory.
	ParamSnapshotMode = "snapshot-mode"
	// ParamMemoryFallback says what a memory snapshot does on a node that
	// cannot take one: MemoryFallbackNone fails, MemoryFallbackFilesystem
	// takes a filesystem snapshot instead.
	ParamMemoryFallback = "memory-fallback"
	// ParamMemoryRestoreBase names the image, pinned by digest, that a
	// restore starts a memory snapshot from when the sandbox's own base
	// image is not one every node may pull anonymously; the snapshot then
	// holds the sandbox's whole root filesystem (ParseMemoryRestoreBase).
	ParamMemoryRestoreBase = "memory-restore-base"
	// ParamMemoryAnonymousPull says whether a memory snapshot may be pushed
	// to a repository anyone may pull from: MemoryAnonymousPullRefuse or
	// MemoryAnonymousPullAllow.
	ParamMemoryAnonymousPull = "memory-anonymous-pull"
	// ParamCheckpointDir is the node directory where CRIU, through
	// containerd, writes checkpoints; CheckpointVolume is mounted at the same path.
	ParamCheckpointDir = "checkpoint-dir"
	// ParamMaxPause bounds the pause window (ParseMaxPause).
	ParamMaxPause = "max-pause"
	// ParamKeepLocal keeps pushed images in the node's containerd for a
	// resume there (ParseKeepLocal).
	ParamKeepLocal = "keep-local"
	// ParamKeepLocalMaxSize bounds the node disk kept images hold
	// (ParseKeepLocalMaxSize).
	ParamKeepLocalMaxSize = "keep-local-max-size"
	// ParamDiskReserve is what a commit leaves free on each node filesystem
	// it writes to, the nodes' eviction threshold (ParseDiskReserve).
	ParamDiskReserve = "disk-reserve"
)

// Values of ParamSnapshotMode, and of the snapshot-mode annotation.
const (
	// SnapshotModeFilesystem commits the containers' root filesystems.
	SnapshotModeFilesystem = "Filesystem"
	// SnapshotModeMemory checkpoints their processes and memory too.
	SnapshotModeMemory = "Memory"
)

// Values of ParamMemoryFallback.
const (
	MemoryFallbackNone       = "None"
	MemoryFallbackFilesystem = "Filesystem"
)

// Values of ParamMemoryAnonymousPull.
const (
	MemoryAnonymousPullRefuse = "Refuse"
	MemoryAnonymousPullAllow  = "Allow"
)

// DefaultCheckpointDir is the default of ParamCheckpointDir.
const DefaultCheckpointDir = "/var/lib/sandbox-snapshot-operator/checkpoints"

// DefaultMaxLayers is the default of ParamMaxLayers, of the committer's
// --max-layers and of config-snapshot's max-layers.
const DefaultMaxLayers = 16

// MaxMaxLayers bounds ParamMaxLayers on both sides, the controller's and the
// committer's: it stays well within the 500 layers overlayfs stacks at most.
const MaxMaxLayers = 128

// Values of ParamMode.
const (
	ModeCommit  = "commit"
	ModeUnpause = "unpause"
	// ModeRelease gives back the images a deleted snapshot kept on the node.
	ModeRelease = "release"
)

// Result names.
const (
	ResultDigests       = "DIGESTS"
	ResultImages        = "IMAGES"
	ResultPauseWindowMS = "PAUSE_WINDOW_MS"
	ResultError         = "ERROR"
	// ResultSnapshotMode is the mode the commit step took: the one asked
	// for, or SnapshotModeFilesystem after a memory fallback.
	ResultSnapshotMode = "SNAPSHOT_MODE"
)

// MaxErrorLength bounds the ERROR result, so that it fits Tekton's 4 KiB
// termination message next to the other results. The operator holds a
// Task's ERROR to the same bound.
const MaxErrorLength = 1024

// Step names. The commit step holds the containers paused; it exits 0 on
// success and ExitCodeThawed on any failure it handled, after thawing them.
const (
	StepCommit = "commit"
	StepPush   = "push"
)

// ExitCodeThawed is the commit step's exit code for a failure after which the
// containers were thawed. Any other failed end of a started commit step may
// have left them paused.
const ExitCodeThawed = 1

// ExitCodeFrozenElsewhere is the commit step's exit code when a container of
// the pod is frozen by another run (another marker, or no marker at all). The
// step paused, thawed and relabelled nothing.
const ExitCodeFrozenElsewhere = 4

// ExitCodeMemoryUnsupported is the commit step's exit code when the node
// cannot take a memory snapshot and no fallback was asked for; nothing is
// left paused.
const ExitCodeMemoryUnsupported = 5

// WorkspaceDockerConfig is the optional workspace holding config.json.
const WorkspaceDockerConfig = "dockerconfig"

// SocketVolume is the volume, supplied by the TaskRun's pod template, that
// holds the node's containerd socket.
const SocketVolume = "containerd-socket"

// OverlayfsVolume is the volume, supplied by the TaskRun's pod template, that
// holds the node's containerd overlayfs snapshots (an emptyDir turns the
// commit step's copy of upper directories off).
const OverlayfsVolume = "containerd-overlayfs"

// CheckpointVolume is the volume, supplied by the TaskRun's pod template,
// holding the node's ParamCheckpointDir in every mode: a memory snapshot is
// written there, and every run removes those of runs that are over.
const CheckpointVolume = "checkpoints"

// RegistryCAVolume is the volume, supplied by the TaskRun's pod template,
// whose files are PEM certificates that verify the registry's, beside the
// system's roots: the operator's registry-ca-configmap, or an empty
// directory.
const RegistryCAVolume = "registry-ca"

// Annotations on the manifest of a memory snapshot's image, a checkpoint
// image: containerd's CRI (2.1 and later) restores a container from an image
// carrying AnnotationCheckpointName, CRI-O from one carrying
// AnnotationCRIOCheckpointName. Its org.opencontainers.image.base.digest is
// the image a restore pulls first, which image deletion keeps while it
// stays.
const (
	AnnotationCheckpointName     = "org.criu.checkpoint.container.name"
	AnnotationCRIOCheckpointName = "io.kubernetes.cri-o.annotations.checkpoint.name"
)

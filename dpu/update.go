package dpu

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/dpu/slots"
	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
)

// UpdateConfig is the update service's section ([update]).
type UpdateConfig struct {
	// MaxBundle bounds an uploaded bundle (default 256MiB).
	MaxBundle string `toml:"max_bundle"`
}

func (c *UpdateConfig) withDefaults() error {
	defString(&c.MaxBundle, "256MiB")
	return nil
}

func (c *UpdateConfig) validate() error {
	if n, err := humanize.ParseBytes(c.MaxBundle); err != nil || n == 0 {
		return fmt.Errorf("--update-max-bundle %q: want a size, as 256MiB: %w", c.MaxBundle, ErrConfig)
	}
	return nil
}

func (c *UpdateConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.MaxBundle, "update-max-bundle", c.MaxBundle, "largest agent bundle POST /v1/update takes (default 256MiB)")
}

// updateService serves POST /v1/update: it takes a signed agent bundle,
// verifies it against the trusted key (signature, every part's hash, the
// architecture, a version newer than the anti-rollback floor), writes it
// into the inactive slot, marks it for a try and exits for the loader to
// start it (package slots, package pid1). The loader commits it once it is
// ready, or falls back. ?dry_run=1 verifies without installing.
type updateService struct {
	cfg     UpdateConfig
	max     int64
	store   *slots.Store
	slot    string // the slot this agent runs from ("" when no loader started it)
	boots   bool   // its loader boots machine bundles (process 1 of a VM)
	version string
	guarded bool // the management API requires credentials
	mu      sync.Mutex
	exit    func()    // ends the agent for the loader to switch slots
	kv      *kv.Store // nil when not served: its disk reserve is left alone
}

func newUpdateService(c UpdateConfig) *updateService {
	return &updateService{cfg: c, exit: func() { syscall.Kill(os.Getpid(), syscall.SIGTERM) }}
}

func (s *updateService) Name() string { return "update" }

func (s *updateService) Open(_ context.Context, env *Env) error {
	n, _ := humanize.ParseBytes(s.cfg.MaxBundle)
	s.max, s.version = int64(n), env.Version
	s.slot = os.Getenv(slots.LoaderEnv)
	s.boots = s.slot != "" && os.Getenv(slots.BootsEnv) != ""
	s.guarded = env.Shared != nil && (env.Shared.Token != "" || env.Shared.MgmtCerts)
	if env.Shared != nil {
		s.kv = env.Shared.Store
	}
	st, err := slots.Open(env.StateDir)
	if err != nil {
		return fmt.Errorf("--state-dir %s: %w", env.StateDir, err)
	}
	s.store = st
	env.Mux.HandleFunc("POST /v1/update", s.serveUpdate)
	return nil
}

func (s *updateService) Start(context.Context, *Env) error { return nil }

func (s *updateService) Stop() {}

func (s *updateService) Status() api.Service {
	switch {
	case !s.guarded:
		return api.Service{Name: "update", Note: "off: the update API needs the operator's token or client certificates (--token-file, --mgmt-client-ca)"}
	case s.slot == "":
		return api.Service{Name: "update", Served: true, Note: "dry runs only: not started by a loader that keeps slots (hecd supervise, or process 1)"}
	}
	return api.Service{Name: "update", Served: true, Note: "running from slot " + s.slot}
}

func (s *updateService) FillStatus(st *api.Status) {
	if s.slot == "" {
		return
	}
	rec, err := s.store.Read()
	if err != nil {
		return
	}
	st.Update = &api.UpdateStatus{Slot: slots.Name(rec.Active), Committed: slots.Name(rec.Committed), Tries: rec.Tries,
		Versions: rec.Versions, Targets: rec.Targets, Floor: rec.Floor, Last: rec.Last}
	if rec.Machine != slots.Base {
		st.Update.Machine = rec.Machine
	}
}

// updateError is a refusal with its HTTP status.
type updateError struct {
	code int
	msg  string
}

func (e *updateError) Error() string { return e.msg }

func refuse(code int, format string, args ...any) error {
	return &updateError{code: code, msg: fmt.Sprintf(format, args...)}
}

func (s *updateService) serveUpdate(w http.ResponseWriter, r *http.Request) {
	dry, _ := strconv.ParseBool(r.URL.Query().Get("dry_run"))
	reply, err := s.update(w, r, dry)
	if err != nil {
		code := http.StatusBadRequest
		var ue *updateError
		if errors.As(err, &ue) {
			code = ue.code
		}
		http.Error(w, "update refused: "+err.Error(), code)
		return
	}
	if dry {
		writeJSON(w, reply)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	writeJSON(w, reply)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	// Stop as on SIGTERM (the store flushed, the region marked stopped),
	// for the loader to start the new slot.
	time.AfterFunc(100*time.Millisecond, s.exit)
}

func (s *updateService) update(w http.ResponseWriter, r *http.Request, dry bool) (api.UpdateReply, error) {
	var reply api.UpdateReply
	if !s.guarded {
		return reply, refuse(http.StatusForbidden, "the update API needs the operator's token or client certificates (start hecd with --token-file or --mgmt-client-ca)")
	}
	if !dry && s.slot == "" {
		return reply, refuse(http.StatusConflict, "this agent was not started by a loader that keeps slots (hecd supervise, or process 1): it cannot switch to a new version; a dry run still verifies a bundle")
	}
	if !s.mu.TryLock() {
		return reply, refuse(http.StatusConflict, "another update is being installed")
	}
	defer s.mu.Unlock()
	rec, err := s.store.Read()
	if err != nil {
		return reply, refuse(http.StatusInternalServerError, "%v", err)
	}
	if !dry && rec.Active != rec.Committed {
		return reply, refuse(http.StatusConflict, "slot %s (%s) is on trial: wait until it is committed or rolled back", slots.Name(rec.Active), rec.Versions[rec.Active])
	}
	pub, err := s.store.TrustedKey()
	if err != nil {
		return reply, refuse(http.StatusConflict, "%v (the loader installs one: hecd supervise --trusted-key FILE)", err)
	}
	slot := rec.Inactive()
	if slot == "" {
		return reply, refuse(http.StatusConflict, "no slot is free: slot %s holds the machine this agent boots (%s) and slot %s the agent it runs (%s); flash a machine bundle from the committed machine",
			slots.Name(rec.Machine), rec.Versions[rec.Machine], slots.Name(rec.Committed), rec.Versions[rec.Committed])
	}
	stage := slot
	if dry {
		stage = "dry-run"
	} else {
		// Neither running nor committed: its space goes to the new one.
		if err := s.store.Clear(slot); err != nil {
			return reply, refuse(http.StatusInternalServerError, "%v", err)
		}
		if _, ok := rec.Versions[slot]; ok {
			delete(rec.Versions, slot)
			if err := s.store.Write(rec); err != nil {
				return reply, refuse(http.StatusInternalServerError, "%v", err)
			}
		}
	}
	limit, why := s.room()
	staged, err := s.store.Stage(stage)
	if err != nil {
		return reply, refuse(http.StatusInternalServerError, "stage the bundle: %v", err)
	}
	installed := false
	defer func() {
		if !installed {
			os.RemoveAll(staged)
		}
	}()
	body := http.MaxBytesReader(w, r.Body, s.max+1<<20) // the archive's headers beyond the parts
	if err := bundle.Unpack(body, staged, limit); err != nil {
		var mbe *http.MaxBytesError
		if errors.Is(err, bundle.ErrTooLarge) || errors.As(err, &mbe) {
			return reply, refuse(http.StatusRequestEntityTooLarge, "the bundle is larger than %s", why)
		}
		return reply, err
	}
	m, err := bundle.Verify(staged, pub)
	if err != nil {
		return reply, err
	}
	if err := onlyParts(staged, m); err != nil {
		return reply, err
	}
	if err := s.takes(m); err != nil {
		return reply, err
	}
	if m.Arch != runtime.GOARCH {
		return reply, refuse(http.StatusBadRequest, "the bundle is built for %q; this agent runs on %s", m.Arch, runtime.GOARCH)
	}
	if _, err := bundle.ParseVersion(m.Version); err != nil {
		return reply, err
	}
	for _, floor := range []struct{ what, v string }{{"the anti-rollback floor", rec.Floor}, {"the running version", s.version}} {
		if _, err := bundle.ParseVersion(floor.v); err != nil {
			continue // none yet, or a development build's
		}
		if c, _ := bundle.CompareVersions(m.Version, floor.v); c <= 0 {
			return reply, refuse(http.StatusConflict, "version %s is not newer than %s (%s)", m.Version, floor.v, floor.what)
		}
	}
	reply = api.UpdateReply{Version: m.Version, From: s.version, Slot: slots.Name(slot), Arch: m.Arch, DryRun: dry, Result: "verified"}
	if dry {
		return reply, nil
	}
	if err := s.store.Install(slot, staged); err != nil {
		return reply, refuse(http.StatusInternalServerError, "%v", err)
	}
	installed = true
	rec.Try(slot, m.Target, m.Version, s.version, time.Now())
	if err := s.store.Write(rec); err != nil {
		return reply, refuse(http.StatusInternalServerError, "%v", err)
	}
	reply.Result = api.UpdateTrying
	return reply, nil
}

// takes checks that the bundle is one this agent's loader can start: an
// agent bundle, or, where process 1 of a VM is the loader and the QEMU
// harness its boot ROM, a machine bundle (a kernel and an initramfs).
func (s *updateService) takes(m bundle.Manifest) error {
	switch {
	case m.Target == bundle.TargetAgent:
		if _, ok := m.Parts[bundle.AgentPart]; !ok {
			return refuse(http.StatusBadRequest, "an agent bundle without %s: build one with mkimage --agent-bundle", bundle.AgentPart)
		}
	case bundle.IsMachine(m.Target):
		if !s.boots {
			return refuse(http.StatusConflict, "a machine bundle (target %s: a kernel and an initramfs) is booted by a VM's boot ROM; this agent's loader runs agent bundles only (mkimage --agent-bundle)", m.Target)
		}
		for _, p := range bundle.MachineParts {
			if _, ok := m.Parts[p]; !ok {
				return refuse(http.StatusBadRequest, "a machine bundle without %s", p)
			}
		}
	default:
		return refuse(http.StatusBadRequest, "a bundle for target %q: this agent takes agent bundles (mkimage --agent-bundle)%s", m.Target,
			map[bool]string{true: " and machine bundles for qemu (make image)"}[s.boots])
	}
	return nil
}

// room is how large a bundle may be, and what bounds it: the limit, or
// the state disk's free space less what the kv store keeps free for itself
// (and a margin), so that an update never fills the disk under the store.
func (s *updateService) room() (int64, string) {
	limit, why := s.max, s.cfg.MaxBundle+" (--update-max-bundle)"
	var st unix.Statfs_t
	if err := unix.Statfs(s.store.Dir(""), &st); err != nil {
		return limit, why
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	keep := int64(updateMargin)
	if s.kv != nil {
		keep += s.kv.Stats().DiskReserve
	}
	if room := free - keep; room < limit {
		return max(room, 0), fmt.Sprintf("the room on the state disk (%s free, %s of it kept for the kv store and the agent)",
			humanize.IBytes(uint64(max(free, 0))), humanize.IBytes(uint64(keep)))
	}
	return limit, why
}

// updateMargin is the state disk's space an update leaves free beyond the
// kv store's reserve.
const updateMargin = 4 << 20

// onlyParts refuses a bundle holding files its manifest does not name:
// nothing unsigned goes into a slot.
func onlyParts(dir string, m bundle.Manifest) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case name == bundle.ManifestFile || name == bundle.SignatureFile || name == bundle.PublicKeyFile:
		case m.Parts[name] != (bundle.Part{}):
		default:
			return refuse(http.StatusBadRequest, "%s is not named by the manifest", name)
		}
	}
	return nil
}

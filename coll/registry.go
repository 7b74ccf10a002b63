package coll

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The etcd registry: Root "etcd://HOST:PORT/NAME" has the ranks meet in
// etcd instead of at rank 0. Each rank writes its member record under
// /hec/coll/NAME/members/RANK (on a lease that ends with the rendezvous
// or the rank), waits for all of them, sets its peers, says ready, and
// waits until every rank has. The communicator's id is the first one
// written under /hec/coll/NAME/comm. Every wait reads the prefix as of
// the rank's own write and then follows it from there, so records a
// faster rank has already withdrawn are still seen.
//
// It speaks etcd's v3 JSON gateway with net/http: etcd's Go client would
// bring gRPC into every program that links the host library (13 MB more
// in hecctl) for a few calls.

// registryLease is how long the records of a rank that died mid-way stay
// (seconds).
const registryLease = 10

// isRegistry reports whether root names an etcd registry.
func isRegistry(root string) bool { return strings.HasPrefix(root, "etcd://") }

func registerEtcd(ctx context.Context, root string, me register, set func(roster)) (roster, error) {
	fail := func(err error) (roster, error) { return roster{}, fmt.Errorf("coll: rendezvous in %s: %w", root, err) }
	u, err := url.Parse(root)
	if err != nil || u.Host == "" || strings.Trim(u.Path, "/") == "" || strings.Contains(strings.Trim(u.Path, "/"), "/") {
		return roster{}, fmt.Errorf("coll: rendezvous %q: want etcd://HOST:PORT/NAME", root)
	}
	e := &etcd{base: "http://" + u.Host + "/v3/"}
	prefix := "/hec/coll/" + strings.Trim(u.Path, "/") + "/"
	var grant struct {
		ID string `json:"ID"`
	}
	if err := e.call(ctx, "lease/grant", map[string]any{"TTL": registryLease}, &grant); err != nil {
		return fail(err)
	}
	lease := grant.ID
	kctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		e.call(rctx, "lease/revoke", map[string]any{"ID": lease}, nil) // a clean end leaves at once
		cancel()
	}()
	go func() { // keep the lease while the ranks gather
		for {
			select {
			case <-kctx.Done():
				return
			case <-time.After(registryLease * time.Second / 3):
				e.call(kctx, "lease/keepalive", map[string]any{"ID": lease}, nil)
			}
		}
	}()
	var b [8]byte
	rand.Read(b[:])
	commKey := prefix + "comm"
	create := map[string]any{
		"compare": []any{map[string]any{"key": b64(commKey), "target": "CREATE", "create_revision": "0"}},
		"success": []any{map[string]any{"request_put": map[string]any{"key": b64(commKey),
			"value": b64(strconv.FormatUint(binary.LittleEndian.Uint64(b[:])>>1, 10)), "lease": lease}}},
	}
	if err := e.call(ctx, "kv/txn", create, nil); err != nil {
		return fail(err)
	}
	rec, _ := json.Marshal(me)
	rev, err := e.put(ctx, prefix+"members/"+strconv.Itoa(me.Rank), string(rec), lease)
	if err != nil {
		return fail(err)
	}
	seen, err := e.wait(ctx, prefix, rev, func(got map[string]string) bool {
		_, ok := got[commKey]
		n := 0
		for k := range got {
			if strings.HasPrefix(k, prefix+"members/") {
				n++
			}
		}
		return ok && n >= me.Size
	})
	if err != nil {
		return fail(fmt.Errorf("not every rank registered: %w", err))
	}
	r := roster{Members: make([]Member, me.Size)}
	if r.Comm, err = strconv.ParseUint(seen[commKey], 10, 64); err != nil {
		return fail(fmt.Errorf("communicator id %q: %w", seen[commKey], err))
	}
	for rank := range me.Size {
		key := prefix + "members/" + strconv.Itoa(rank)
		var reg register
		if err := json.Unmarshal([]byte(seen[key]), &reg); err != nil {
			return fail(fmt.Errorf("rank %d's record %q: %w", rank, seen[key], err))
		}
		switch {
		case reg.Size != me.Size:
			return fail(fmt.Errorf("rank %d says %d ranks, this one %d", rank, reg.Size, me.Size))
		case reg.Rank != rank || reg.Node == 0 || reg.Addr == "":
			return fail(fmt.Errorf("rank %d's record %s", rank, seen[key]))
		}
		r.Members[rank] = reg.Member
	}
	set(r)
	if rev, err = e.put(ctx, prefix+"ready/"+strconv.Itoa(me.Rank), "", lease); err != nil {
		return fail(err)
	}
	if _, err := e.wait(ctx, prefix+"ready/", rev, func(got map[string]string) bool { return len(got) >= me.Size }); err != nil {
		return fail(fmt.Errorf("not every rank got ready: %w", err))
	}
	return r, nil
}

// etcd is a client of etcd's v3 JSON gateway, for what the registry needs.
type etcd struct {
	base string // http://HOST:PORT/v3/
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func unb64(s string) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	return string(b)
}

// call posts req to the gateway's path and decodes the answer into resp
// (when not nil).
func (e *etcd) call(ctx context.Context, path string, req, resp any) error {
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return err
	}
	defer hresp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(hresp.Body, 16<<20))
	if err != nil {
		return err
	}
	if hresp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, hresp.Status, bytes.TrimSpace(out))
	}
	if resp != nil {
		if err := json.Unmarshal(out, resp); err != nil {
			return fmt.Errorf("etcd %s: %w", path, err)
		}
	}
	return nil
}

type etcdHeader struct {
	Revision int64 `json:"revision,string"`
}

type etcdKV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// put writes key on lease and returns the revision of the write.
func (e *etcd) put(ctx context.Context, key, value, lease string) (int64, error) {
	var resp struct {
		Header etcdHeader `json:"header"`
	}
	if err := e.call(ctx, "kv/put", map[string]any{"key": b64(key), "value": b64(value), "lease": lease}, &resp); err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// prefixEnd is the end of the range of keys that start with prefix.
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	b[len(b)-1]++ // prefixes here end in '/'
	return string(b)
}

// wait reads the keys under prefix as of revision rev, then follows every
// write after it, until done says the keys seen (deleted ones kept) are
// enough.
func (e *etcd) wait(ctx context.Context, prefix string, rev int64, done func(map[string]string) bool) (map[string]string, error) {
	got := map[string]string{}
	var rng struct {
		KVs []etcdKV `json:"kvs"`
	}
	if err := e.call(ctx, "kv/range", map[string]any{"key": b64(prefix), "range_end": b64(prefixEnd(prefix)),
		"revision": strconv.FormatInt(rev, 10)}, &rng); err != nil {
		return nil, err
	}
	for _, kv := range rng.KVs {
		got[unb64(kv.Key)] = unb64(kv.Value)
	}
	if done(got) {
		return got, nil
	}
	body, _ := json.Marshal(map[string]any{"create_request": map[string]any{"key": b64(prefix),
		"range_end": b64(prefixEnd(prefix)), "start_revision": strconv.FormatInt(rev+1, 10)}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"watch", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd watch: %s", resp.Status)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Result struct {
				Events []struct {
					Type string `json:"type"` // "" is a put: the gateway leaves out the zero value
					KV   etcdKV `json:"kv"`
				} `json:"events"`
				Canceled     bool   `json:"canceled"`
				CancelReason string `json:"cancel_reason"`
			} `json:"result"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := dec.Decode(&msg); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("etcd watch: %w", err)
		}
		if msg.Error != nil {
			return nil, fmt.Errorf("etcd watch: %s", msg.Error.Message)
		}
		if msg.Result.Canceled {
			return nil, fmt.Errorf("etcd watch canceled: %s", msg.Result.CancelReason)
		}
		for _, ev := range msg.Result.Events {
			if ev.Type == "" || ev.Type == "PUT" {
				got[unb64(ev.KV.Key)] = unb64(ev.KV.Value)
			}
		}
		if done(got) {
			return got, nil
		}
	}
}

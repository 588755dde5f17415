package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
)

// Batches (backend.BatchBackend): a batch costs one round trip to each
// Redis node it touches instead of one per item. On a single node its
// items run in one EVAL of their batch script (scripts.go), each item the
// body of its single call's script over its own keys and arguments; in a
// Cluster they are pipelined, each item its own script to its key's master.
// Either way each item is decided exactly as its single call would be, on
// its own: the items of one batch have distinct keys, and no item's
// outcome depends on another's. An item that Redis refused (its script
// raised an error) gets its own unavailable error and the others' answers
// stand; a batch that could not be carried at all (a connection error)
// answers every item unavailable.

var _ backend.BatchBackend = (*Backend)(nil)

// scriptCall is one script run: the script, its keys and its arguments. A
// zero scriptCall (no script) is a request answered without Redis.
type scriptCall struct {
	op     string // "acquire", "release", "extend": for errors
	script *goredis.Script
	batch  *goredis.Script // the script of a batch of such calls
	keys   []string
	args   []any
}

// oneScript runs a batch as one EVAL of its batch script on a single Redis
// node; a Cluster batch, whose keys are on several nodes, is pipelined. One
// EVAL is one command for Redis to parse and dispatch instead of one per
// item: BenchmarkBackendBatch measures both (tests set it to cover both).
var oneScript = true

// runOne makes one call: check req and build its script call, run it,
// read its reply.
func runOne[Req, Res any](ctx context.Context, b *Backend, req Req,
	call func(Req) (scriptCall, error), reply func(Req, []any) (Res, error),
) (Res, error) {
	var zero Res
	c, err := call(req)
	if err != nil || c.script == nil {
		return zero, err
	}
	v, err := c.script.Run(ctx, b.client, c.keys, c.args...).Result()
	if err != nil {
		return zero, b.fail(c.op, err)
	}
	return reply(req, replySlice(v))
}

// runPipelined makes the calls of reqs in one pipeline, each item's
// outcome its own.
func runPipelined[Req, Res any](ctx context.Context, b *Backend, reqs []Req,
	call func(Req) (scriptCall, error), reply func(Req, []any) (Res, error),
) []backend.Outcome[Res] {
	out := make([]backend.Outcome[Res], len(reqs))
	calls := make([]scriptCall, len(reqs))
	var sent []int
	for i, r := range reqs {
		calls[i], out[i].Err = call(r)
		if out[i].Err == nil && calls[i].script != nil {
			sent = append(sent, i)
		}
	}
	if len(sent) == 0 {
		return out
	}
	if _, cluster := b.client.(*goredis.ClusterClient); !cluster && oneScript {
		runScripted(ctx, b, reqs, calls, sent, out, reply)
		return out
	}
	cmds := make([]*goredis.Cmd, len(reqs))
	pipe := b.client.Pipeline()
	for _, i := range sent {
		cmds[i] = calls[i].script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	// Exec's error is the first failed command's; each command keeps its
	// own, read below.
	_, _ = pipe.Exec(ctx)
	// A node that does not have a script yet (a new or restarted node, a
	// SCRIPT FLUSH) refused those items without running them: send them
	// again with the script's text, which loads it.
	var again []int
	for _, i := range sent {
		if isNoScript(cmds[i].Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := b.client.Pipeline()
		for _, i := range again {
			cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, i := range sent {
		v, err := cmds[i].Result()
		if err != nil {
			out[i].Err = b.fail(calls[i].op, err)
			continue
		}
		out[i].Value, out[i].Err = reply(reqs[i], replySlice(v))
	}
	return out
}

// runScripted makes the calls sent of reqs in one EVAL of their batch
// script (every call of a batch is of one kind) and sets their outcomes.
func runScripted[Req, Res any](ctx context.Context, b *Backend, reqs []Req, calls []scriptCall, sent []int,
	out []backend.Outcome[Res], reply func(Req, []any) (Res, error),
) {
	first := calls[sent[0]]
	args := make([]any, 1, 1+2*len(sent))
	args[0] = len(sent)
	var keys []string
	var itemArgs []any
	for _, i := range sent {
		args = append(args, len(calls[i].keys))
		keys = append(keys, calls[i].keys...)
	}
	for _, i := range sent {
		args = append(args, len(calls[i].args))
		itemArgs = append(itemArgs, calls[i].args...)
	}
	v, err := first.batch.Run(ctx, b.client, keys, append(args, itemArgs...)...).Result()
	replies, ok := v.([]any)
	if err == nil && (!ok || len(replies) != len(sent)) {
		err = fmt.Errorf("unexpected batch script reply %v", v)
	}
	for j, i := range sent {
		if err != nil {
			out[i].Err = b.fail(first.op, err)
			continue
		}
		r := replySlice(replies[j])
		if len(r) == 2 && asInt(r[0]) == -2 { // the item's own error (batchOf)
			out[i].Err = b.fail(first.op, errors.New(asString(r[1])))
			continue
		}
		out[i].Value, out[i].Err = reply(reqs[i], r)
	}
}

// replySlice is a script's reply as a list: a table as it is, a number (the
// release script's) as a list of one.
func replySlice(v any) []any {
	if s, ok := v.([]any); ok {
		return s
	}
	return []any{v}
}

func isNoScript(err error) bool {
	var rerr goredis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOSCRIPT")
}

// AcquireBatch implements backend.BatchBackend: every item's acquire
// script in one pipeline.
//
// A grant of a semaphore or rwlock (Kind other than a mutex) runs its own
// script (grants_lua.go), one call per item, before the mutexes' pipeline.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.Outcome[backend.AcquireResult], error) {
	res := make([]backend.Outcome[backend.AcquireResult], len(reqs))
	var sets []backend.AcquireSetRequest
	var at []int // the index in reqs of each of sets
	for i, r := range reqs {
		if r.Kind != backend.KindMutex {
			res[i].Value, res[i].Err = b.acquireGrant(ctx, r)
			continue
		}
		sets = append(sets, acquireSetOf(r))
		at = append(at, i)
	}
	outs := runPipelined(ctx, b, sets, b.acquireCall, b.acquireReply)
	for j, o := range outs {
		i := at[j]
		res[i] = backend.Outcome[backend.AcquireResult]{Value: acquireResultOf(o.Value), Err: o.Err}
		if o.Err == nil {
			res[i].Value, res[i].Err = b.withHolders(ctx, reqs[i].Key, res[i].Value)
		}
	}
	return res, nil
}

// ReleaseBatch implements backend.BatchBackend: every item's release
// script in one pipeline.
func (b *Backend) ReleaseBatch(ctx context.Context, reqs []backend.ReleaseRequest) ([]backend.Outcome[bool], error) {
	sets := make([]backend.ReleaseSetRequest, len(reqs))
	for i, r := range reqs {
		sets[i] = releaseSetOf(r)
	}
	return runPipelined(ctx, b, sets, b.releaseCall, b.releaseReply), nil
}

// ExtendBatch implements backend.BatchBackend: every item's extend script
// in one pipeline.
func (b *Backend) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	sets := make([]backend.ExtendSetRequest, len(reqs))
	for i, r := range reqs {
		sets[i] = extendSetOf(r)
	}
	outs := runPipelined(ctx, b, sets, b.extendCall, b.extendReply)
	res := make([]backend.Outcome[backend.ExtendResult], len(reqs))
	for i, o := range outs {
		res[i] = backend.Outcome[backend.ExtendResult]{Value: extendResultOf(o.Value), Err: o.Err}
	}
	return res, nil
}

// A single-key call is a set of one.

func acquireSetOf(req backend.AcquireRequest) backend.AcquireSetRequest {
	return backend.AcquireSetRequest{Claims: []backend.Claim{{Key: req.Key}}, OwnerToken: req.OwnerToken,
		TTL: req.TTL, Holder: req.Holder, Stamp: req.Stamp, Request: req.Request, Replay: req.Replay,
		LockDelay: req.LockDelay, ReplayOnly: req.ReplayOnly}
}

func acquireResultOf(res backend.AcquireSetResult) backend.AcquireResult {
	out := backend.AcquireResult{Acquired: res.Acquired, Record: res.Blocker, Replayed: res.Replayed, Replay: res.Replay}
	if res.Acquired && len(res.Records) > 0 {
		out.Record = res.Records[0]
	}
	return out
}

func releaseSetOf(req backend.ReleaseRequest) backend.ReleaseSetRequest {
	return backend.ReleaseSetRequest{Keys: []string{req.Key}, OwnerToken: req.OwnerToken, Stamp: req.Stamp,
		Request: req.Request, Abandon: req.Abandon}
}

func extendSetOf(req backend.ExtendRequest) backend.ExtendSetRequest {
	return backend.ExtendSetRequest{Keys: []string{req.Key}, OwnerToken: req.OwnerToken, TTL: req.TTL,
		Stamp: req.Stamp, Request: req.Request}
}

func extendResultOf(res backend.ExtendSetResult) backend.ExtendResult {
	if !res.Extended || len(res.Records) == 0 {
		return backend.ExtendResult{}
	}
	return backend.ExtendResult{Extended: true, Record: res.Records[0]}
}

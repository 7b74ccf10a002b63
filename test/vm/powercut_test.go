package vm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/qemu"
)

// powerCuts boots the VM, streams SETs over RESP from several clients,
// cuts the power (SIGKILL of QEMU) at a random moment, boots again from the
// same disk and counts acknowledged writes that are gone. It returns
// acknowledged and lost writes over all cuts.
func powerCuts(t *testing.T, name, durability string, cuts int) (acked, lost int) {
	vm, o := boot(t, name)
	o.KernelArgs = "hec.durability=" + durability
	vm.PowerCut()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(cuts), 42))
	for cut := 0; cut < cuts; cut++ {
		var err error
		if vm, err = qemu.Up(ctx, o); err != nil {
			t.Fatalf("boot %d: %v", cut, err)
		}
		var mu sync.Mutex
		ackedNow := map[string]string{}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				c := redis.NewClient(&redis.Options{Addr: vm.RESP, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
				defer c.Close()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k, v := fmt.Sprintf("cut%d:w%d:%d", cut, w, i), fmt.Sprintf("value-%d-%d", cut, i)
					if err := c.Set(ctx, k, v, 0).Err(); err != nil {
						return // the power went
					}
					mu.Lock()
					ackedNow[k] = v
					mu.Unlock()
				}
			}(w)
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		vm.PowerCut()
		close(stop)
		wg.Wait()
		if vm, err = qemu.Up(ctx, o); err != nil {
			t.Fatalf("boot after cut %d: %v", cut, err)
		}
		c := redis.NewClient(&redis.Options{Addr: vm.RESP})
		lostNow := 0
		for k, v := range ackedNow {
			if got, err := c.Get(ctx, k).Result(); err != nil || got != v {
				lostNow++
			}
		}
		c.Close()
		acked += len(ackedNow)
		lost += lostNow
		t.Logf("%s cut %d: %d writes acknowledged, %d lost", durability, cut, len(ackedNow), lostNow)
		vm.PowerCut()
	}
	return acked, lost
}

// TestPowerCutSync: with sync durability no acknowledged write is lost
// over 20 power cuts.
func TestPowerCutSync(t *testing.T) {
	cuts := 20
	if testing.Short() {
		cuts = 3
	}
	acked, lost := powerCuts(t, "cutsync", "sync", cuts)
	t.Logf("sync: %d cuts, %d acknowledged writes, %d lost", cuts, acked, lost)
	if acked == 0 {
		t.Fatal("no write was acknowledged: the test tested nothing")
	}
	if lost != 0 {
		t.Fatalf("sync mode lost %d of %d acknowledged writes", lost, acked)
	}
}

// TestPowerCutAsync is the control: in async mode acknowledged writes sit in
// the guest's page cache and a power cut loses some, so the test above can
// catch a loss.
func TestPowerCutAsync(t *testing.T) {
	acked, lost := powerCuts(t, "cutasync", "async", 3)
	t.Logf("async: 3 cuts, %d acknowledged writes, %d lost", acked, lost)
	if lost == 0 {
		t.Fatalf("async mode lost none of %d writes over 3 cuts: the power cut does not cut", acked)
	}
}

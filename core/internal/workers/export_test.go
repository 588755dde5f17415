package workers

// Idle is how many workers are parked (or about to park).
func (p *Pool) Idle() int { return int(p.idle.Load()) }

// Live is how many workers have started and not ended.
func (p *Pool) Live() int { return int(p.live.Load()) }

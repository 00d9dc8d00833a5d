-- 0012_notify_lock: close the race 0008 left open. A transition decides whether to NOTIFY a
-- key when its wake statement runs, but commits later; a waiter that announced the key in
-- between, then read the database before that commit, saw nothing ready and got no
-- notification: it slept its whole wait (seen under load as a promoted job left waiting
-- for the 5 s drain delay). Now a decision not to notify holds a shared advisory lock on
-- the key until its transaction ends, and an announcement takes it exclusively
-- (listeners.lock) before its entry is written: the announcement waits for every
-- transaction that decided without it, so the waiter's read that follows sees what they
-- wrote; later deciders see the entry and notify (without the lock). Lock class 1886615921
-- ('psyq'); the key hashes channel and payload.
CREATE OR REPLACE FUNCTION notify_heard(channel text, payload text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM listeners WHERE key = payload AND expires > now_ms()) THEN
        -- Nobody listens yet: hold the key to this transaction's end (an announcement under
        -- way waits for it), then look again (one may have committed in between).
        PERFORM pg_advisory_xact_lock_shared(1886615921, hashtext(channel || payload));
        IF NOT EXISTS (SELECT 1 FROM listeners WHERE key = payload AND expires > now_ms()) THEN
            RETURN;
        END IF;
    END IF;
    PERFORM pg_notify(channel, payload);
END
$$;

"""The job driver: a task in every `runworker` process that claims jobs and runs their lines.

A driver holds a few jobs at once, each of a different owner (a lease in the database per
job, renewed every second); a worker that dies stops renewing, and another worker's
driver resumes the job from its last committed chunk. Lines run through the API views in
this process at batch priority, as their owner's token record (so its current scope,
admission, limits and quotas apply as to any request), a bounded number at a time shared
round-robin between owners; an owner answered 429 waits out its Retry-After without
holding slots, and a line gives up after HOSTING_BATCH_LINE_RETRIES tries or when its
wait would outlast the job's window. Each chunk's records are stored as parts and
committed with the progress, in order. Lines in flight when a driver dies are run again
by the next one, and only committed chunks reach the output: every line is in the output
or the error file once. The loop also deletes expired files (jobs/retention.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from typing import Any

from asgiref.sync import sync_to_async

from models_registry.core.conf import conf
from models_registry.jobs import files, job_leases, output_quota, retention
from models_registry.jobs.chunks import Chunk, ChunkOutcome, ChunkReader, Progress, answer_record, failure_record
from models_registry.jobs.fair_share import FairShare
from models_registry.jobs.line_calls import LineCalls
from models_registry.jobs.lines import JobLine
from models_registry.catalog.lookups import fresh_connection
from models_registry.core.waits import event_set

logger = logging.getLogger(__name__)

RETRY_STATUSES = {429, 503, 504}
MAX_TIMEOUTS = 3  # a line that timed out this often goes to the error file
MAX_BACKOFF_S = 10.0
STATUS_EVERY_S = 1.0  # how soon a cancel is seen


def _db(function: Any) -> Any:
    return sync_to_async(fresh_connection(function))


class LeaseLost(Exception):
    """Another driver holds the job now: drop everything not committed."""


class JobDriver:
    """Claims jobs of different owners and runs them side by side, until cancelled.

    A driver holds up to HOSTING_BATCH_MAX_JOBS jobs, at most one per owner, and their
    lines share its HOSTING_BATCH_IN_FLIGHT slots round-robin by owner (jobs/fair_share.py).
    """

    def __init__(self, owner: str, caller: LineCalls) -> None:
        self.owner = owner
        self.caller = caller
        self.chunk_lines = conf.BATCH_CHUNK_LINES
        self.in_flight = conf.BATCH_IN_FLIGHT
        self.share = FairShare(self.in_flight)
        self.max_jobs = max(1, conf.BATCH_MAX_JOBS)
        self.max_retries = conf.BATCH_LINE_RETRIES
        self.lease_s = conf.BATCH_LEASE_S
        self.jobs: dict[int, tuple[job_leases.ClaimedJob, asyncio.Task[None]]] = {}
        self._failures: dict[int, int] = {}
        self._ended = asyncio.Event()

    async def run(self) -> None:
        """Claim and drive jobs forever (errors are logged and retried)."""
        backoff = 1.0
        try:
            while True:
                await retention.maybe_sweep()
                job = None
                if len(self.jobs) < self.max_jobs:
                    try:
                        busy = {held.owner_id for held, _ in self.jobs.values()}
                        job = await _db(job_leases.claim)(self.owner, self.lease_s, busy)
                        backoff = 1.0
                    except Exception:
                        logger.exception("claiming a batch job failed; retrying in %.0f s", backoff)
                        await asyncio.sleep(backoff)
                        backoff = min(30.0, backoff * 2)
                        continue
                if job is not None:
                    self.jobs[job.pk] = (job, asyncio.ensure_future(self._guarded(job)))
                    continue  # another owner's job may be waiting too
                self._ended.clear()
                # the next poll, or at once when a job ends (a slot for another one)
                await event_set(self._ended, conf.BATCH_POLL_S)
        finally:
            tasks = [task for _, task in self.jobs.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _guarded(self, job: job_leases.ClaimedJob) -> None:
        """Drive one job; a failure is logged, and the job is taken up again after a pause."""
        try:
            await self.drive(job)
            self._failures.pop(job.pk, None)
        except asyncio.CancelledError:  # a clean stop: another worker resumes the job at once
            await _db(job_leases.release)(job.pk, self.owner)
            raise
        except LeaseLost:
            logger.warning("lost the lease of batch %s; another worker resumes it", job.public_id)
        except Exception:
            failures = self._failures[job.pk] = self._failures.get(job.pk, 0) + 1
            pause = min(30.0, 2.0 ** (failures - 1))
            logger.exception("driving batch %s failed; taking it up again in %.0f s", job.public_id, pause)
            await asyncio.sleep(pause)
        finally:
            self.jobs.pop(job.pk, None)
            self._ended.set()

    async def drive(self, job: job_leases.ClaimedJob) -> None:
        """Run job from its committed progress to its end (or until stopped or taken)."""
        logger.info("driving batch %s from line %d", job.public_id, job.progress.next_line)
        if job.status == "validating":
            await _db(job_leases.set_status)(job.pk, self.owner, ("validating",), "in_progress")
        watch = _Watch(self, job)
        if await _db(job_leases.renew)(job.pk, self.owner, self.lease_s) == "revoking":
            watch.status = "revoking"  # its owner was revoked while it waited: no line runs as a 401
        watcher = asyncio.ensure_future(watch.run())
        try:
            progress = job.progress
            if watch.status in ("validating", "in_progress"):
                progress = await self._run_lines(job, progress, watch)
            if watch.status in ("validating", "in_progress"):  # every line answered
                if await _db(job_leases.set_status)(job.pk, self.owner, ("in_progress",), "finalizing"):
                    watch.status = "finalizing"
                else:
                    watch.status = await _db(job_leases.renew)(job.pk, self.owner, self.lease_s) or "lost"
            code = None
            if watch.status == "revoking":
                if not await _db(job_leases.stop_revoked)(job.pk, self.owner):
                    raise LeaseLost()
                watch.status, code = "cancelling", "token_revoked"
            final = {"finalizing": "completed", "cancelling": "cancelled", "expiring": "expired",
                     "over_quota": "failed"}.get(watch.status)
            if final is None:
                raise LeaseLost()
            if final in ("cancelled", "expired"):
                code = code or ("batch_cancelled" if final == "cancelled" else "batch_expired")
                await self._close_remaining(job, progress, code, watch)
            # Assembling a big output takes a while: not on the thread the heartbeats' queries use.
            if await sync_to_async(fresh_connection(job_leases.finish), thread_sensitive=False)(
                    job.pk, self.owner, final, watch.errors):
                logger.info("batch %s %s", job.public_id, final)
        except FileNotFoundError as error:
            logger.error("batch %s: input file missing from storage (%s)", job.public_id, error)
            await _db(job_leases.fail)(job.pk, self.owner, "input_file_missing",
                                   f"the input file {job.input_file.public_id} is no longer in the file storage")
        finally:
            watcher.cancel()

    async def _run_lines(self, job: job_leases.ClaimedJob, progress: Progress, watch: _Watch) -> Progress:
        """Run lines chunk by chunk, a few chunks ahead, committing in order; the progress reached."""
        handle = await asyncio.to_thread(files.open_file, job.input_file)
        try:
            reader = ChunkReader(handle, progress, self.chunk_lines, conf.MAX_BODY_BYTES)
            ahead = max(2, -(-self.in_flight // self.chunk_lines) + 1)
            pending: deque[tuple[Chunk, asyncio.Task[ChunkOutcome]]] = deque()
            exhausted = False
            try:
                while True:
                    while not exhausted and len(pending) < ahead:
                        chunk = await asyncio.to_thread(reader.next_chunk)
                        if chunk is None:
                            exhausted = True
                            break
                        pending.append((chunk, asyncio.ensure_future(self._run_chunk(job, chunk, watch))))
                    if not pending:
                        return progress
                    chunk, task = pending[0]
                    done, _ = await asyncio.wait({task, watch.changed}, return_when=asyncio.FIRST_COMPLETED)
                    if watch.status not in ("validating", "in_progress"):
                        return progress  # cancelled, expired or taken: uncommitted lines are redone or closed
                    if task not in done:
                        continue
                    pending.popleft()
                    try:
                        progress = await self._commit(job, progress, chunk, task.result())
                    except output_quota.OverQuota as over:  # stops here: the chunks committed are its output
                        watch.stop(over.record())
                        return progress
            finally:
                for _, task in pending:
                    task.cancel()
                await asyncio.gather(*(t for _, t in pending), return_exceptions=True)
        finally:
            await asyncio.to_thread(handle.close)

    async def _run_chunk(self, job: job_leases.ClaimedJob, chunk: Chunk, watch: _Watch) -> ChunkOutcome:
        results = await asyncio.gather(*(self._run_line(job, line, watch) for line in chunk.lines))
        output = [record for ok, record in results if ok]
        errors = [record for ok, record in results if not ok]
        errors += [failure_record(None, "invalid_line", f"line {n}: {why}") for n, why in chunk.unreadable]
        return ChunkOutcome(output=output, errors=errors)

    async def _run_line(self, job: job_leases.ClaimedJob, line: JobLine, watch: _Watch) -> tuple[bool, bytes]:
        timeouts, retries, backoff = 0, 0, 0.2
        lane = job.owner_id
        while True:
            async with self.share.slot(lane):
                answer = await self.caller.call(line, job.owner_id, f"{job.public_id}-{line.number}")
            if answer.status == 200:
                self.share.succeeded(lane)
                return True, answer_record(line.custom_id, 200, answer.body)
            retry = answer.status in RETRY_STATUSES and retries < self.max_retries
            if answer.status == 504:
                timeouts += 1
                retry = retry and timeouts < MAX_TIMEOUTS
            wait = answer.retry_after_s if answer.retry_after_s is not None else backoff
            if answer.status == 429 and not job.fits_window(wait):
                retry = False  # the owner's limit opens again only after the job's window
            if not retry:
                return False, answer_record(line.custom_id, answer.status, answer.body, answer.error())
            retries += 1
            backoff = min(MAX_BACKOFF_S, backoff * 2)
            if answer.status == 429:
                # The owner's own limit: its lines wait (without holding slots), the other owners' go on.
                self.share.throttle(lane, wait * random.uniform(1.0, 1.2))
                continue
            # Overloaded, unavailable (worker or broker restarting): wait, then again.
            await asyncio.sleep(min(MAX_BACKOFF_S, wait) * random.uniform(0.8, 1.2))

    async def _commit(self, job: job_leases.ClaimedJob, progress: Progress, chunk: Chunk,
                      outcome: ChunkOutcome) -> Progress:
        """Write and commit a chunk's records once they fit the owner's storage quota (OverQuota if not)."""
        field, size = f"batch:{job.public_id}:{chunk.index}", output_quota.size(outcome)
        held = await output_quota.hold(job.owner_id, field, size, progress.next_line)
        try:
            parts = (
                await asyncio.to_thread(files.write_part, job.public_id, chunk.index, "output", outcome.output),
                await asyncio.to_thread(files.write_part, job.public_id, chunk.index, "errors", outcome.errors),
            )
            async with output_quota.settled(job.owner_id, field, held):
                after = await _db(job_leases.commit_chunk)(job.pk, self.owner, progress, chunk, outcome, parts, size)
        except BaseException:
            await output_quota.release(job.owner_id, field, held)
            raise
        if after is None:
            await asyncio.to_thread(files.delete_quietly, parts)
            raise LeaseLost()
        return after

    async def _close_remaining(self, job: job_leases.ClaimedJob, progress: Progress, code: str, watch: _Watch) -> None:
        """Put every line not yet committed in the error file with code (no inference), as far as the quota lets."""
        message = "the batch was cancelled before this request ran" if code == "batch_cancelled" else \
            "the batch expired before this request ran"
        handle = await asyncio.to_thread(files.open_file, job.input_file)
        try:
            reader = ChunkReader(handle, progress, max(self.chunk_lines, 4096), conf.MAX_BODY_BYTES)
            while (chunk := await asyncio.to_thread(reader.next_chunk)) is not None:
                errors = [failure_record(line.custom_id, code, message) for line in chunk.lines]
                errors += [failure_record(None, code, f"line {n}: {why}") for n, why in chunk.unreadable]
                progress = await self._commit(job, progress, chunk, ChunkOutcome(output=[], errors=errors))
        except output_quota.OverQuota as over:
            watch.errors.append(over.record(written=False))
        finally:
            await asyncio.to_thread(handle.close)


class _Watch:
    """Renews the lease and follows the job's status (cancel, expiry) while it runs."""

    def __init__(self, driver: JobDriver, job: job_leases.ClaimedJob) -> None:
        self.driver = driver
        self.job = job
        self.status = "in_progress" if job.status == "validating" else job.status
        self.changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.errors: list[dict[str, Any]] = []  # what the job's errors say besides, when it ends

    def stop(self, error: dict[str, Any]) -> None:
        """End the job as failed with error (its output past the storage quota): it keeps what it committed."""
        self.status = "over_quota"
        self.errors.append(error)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            try:
                status = await _db(job_leases.renew)(self.job.pk, self.driver.owner, self.driver.lease_s)
            except Exception as error:  # the database is away: keep running, try again
                logger.warning("could not renew a batch lease: %s", error)
                continue
            new = status or "lost"
            if new != self.status and self.status in ("validating", "in_progress"):
                self.status = new
                if not self.changed.done():
                    self.changed.set_result(None)

"""The Files and Batches APIs: files, batch jobs and their committed chunks."""

from __future__ import annotations

from django.db import models

from models_registry.models.tokens import ApiToken


class BatchFile(models.Model):
    """A file of the Files API: a batch input (JSONL requests) or a job's output or errors."""

    PURPOSES = [("batch", "batch"), ("batch_output", "batch_output")]

    public_id = models.CharField(max_length=40, unique=True, editable=False, help_text="file-…, as the API shows it.")
    owner = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="batch_files")
    filename = models.CharField(max_length=255)
    purpose = models.CharField(max_length=20, choices=PURPOSES)
    bytes = models.BigIntegerField(default=0)
    lines = models.PositiveIntegerField(default=0, help_text="Requests (input) or records (output).")
    urls = models.JSONField(default=list, blank=True, help_text="Distinct request urls of an input file.")
    storage_name = models.CharField(max_length=500, help_text="Name in the default file storage.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Deleted by the job drivers after this.")
    # A deleted input file that a batch still names keeps its row (the batch shows its id); its bytes are gone.
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.filename})"


class BatchJob(models.Model):
    """A batch of the Batches API: an input file run line by line through the workers."""

    STATUSES = [(s, s) for s in ("validating", "in_progress", "finalizing", "completed", "failed", "expired",
                                 "cancelling", "cancelled")]
    ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")

    public_id = models.CharField(max_length=40, unique=True, editable=False, help_text="batch_…, as the API shows it.")
    owner = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="batch_jobs")
    input_file = models.ForeignKey(BatchFile, on_delete=models.PROTECT, related_name="jobs")
    endpoint = models.CharField(max_length=300)
    completion_window = models.CharField(max_length=10, default="24h")
    metadata = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=12, choices=STATUSES, default="validating", db_index=True)
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    errors = models.JSONField(null=True, blank=True, help_text="Why the batch failed, OpenAI's errors.data.")
    # Progress, committed with each chunk (see jobs/chunks.py).
    next_chunk = models.PositiveIntegerField(default=0)
    next_line = models.PositiveBigIntegerField(default=1)
    next_offset = models.PositiveBigIntegerField(default=0)
    output_ttl_s = models.PositiveIntegerField(null=True, blank=True,
                                               help_text="output_expires_after: seconds its output files are kept.")
    output_file = models.ForeignKey(BatchFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error_file = models.ForeignKey(BatchFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The driver holding the job (a worker process); another one takes over once the lease expires.
    lease_owner = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.public_id


class BatchChunk(models.Model):
    """A committed chunk of a job: which input lines it holds and where their records are."""

    job = models.ForeignKey(BatchJob, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    first_line = models.PositiveBigIntegerField()
    next_line = models.PositiveBigIntegerField()
    start_offset = models.PositiveBigIntegerField()
    end_offset = models.PositiveBigIntegerField()
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    output_part = models.CharField(max_length=500, blank=True)
    error_part = models.CharField(max_length=500, blank=True)
    # Both parts' bytes: a running job's output counts against its owner's storage quota (policy.file_quota).
    bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="unique_chunk_per_job")]

    def __str__(self) -> str:
        return f"{self.job.public_id} chunk {self.index}"

"""The windows table, partitioned by day on ``window_start``.

Django cannot declare a partitioned table, so the model is ``managed = False`` and the table
is created here. Daily partitions are created ahead by a beat task (and on demand by the
worker); retention drops whole partitions, which costs nothing compared with DELETE.
No foreign keys: the worker checks every window's GPU against its placement before COPY.
"""

from django.db import migrations

FORWARD = r"""
CREATE TABLE telemetry_window (
    gpu_id uuid NOT NULL,
    window_start timestamptz NOT NULL,
    node_id uuid NOT NULL,
    batch_id bigint NOT NULL,
    samples_ok smallint NOT NULL,
    samples_expected smallint NOT NULL,
    state varchar(8) NOT NULL CHECK (state IN ('up', 'degraded', 'down')),
    state_reason text,
    util_gpu_min double precision,
    util_gpu_avg double precision,
    util_gpu_max double precision,
    util_mem_avg double precision,
    util_mem_max double precision,
    mem_used_max_bytes bigint,
    mem_total_bytes bigint,
    power_avg_w double precision,
    power_max_w double precision,
    energy_mj bigint,
    temp_avg_c double precision,
    temp_max_c double precision,
    clock_sm_avg_mhz double precision,
    clock_mem_avg_mhz double precision,
    throttle_reasons bigint,
    ecc_corrected bigint,
    ecc_uncorrected bigint,
    remapped_rows_correctable integer,
    remapped_rows_uncorrectable integer,
    remapped_rows_pending boolean,
    retired_pages integer,
    pcie_replays bigint,
    recovery_action smallint,
    PRIMARY KEY (gpu_id, window_start)
) PARTITION BY RANGE (window_start);
"""

BACKWARD = "DROP TABLE telemetry_window;"


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
